"""Gradient rules, keyed by (domain, operator).

A rule is ``fn(b, node, grad_outputs) -> grad_inputs``: ``b`` is the
BackwardBuilder collecting the backward graph, ``node`` the forward
NodeProto, ``grad_outputs`` the names of the gradients of its outputs (None
where no gradient flows).  It returns one entry per node input: the name of
that input's gradient, or None.  Rules read forward values by their names;
every forward value a rule reads is retained by the forward program.

Operators whose outputs carry no gradient (comparisons, shapes, indices ...)
are declared with ``no_gradient``; an operator with neither is an error that
names it.
"""
from ..runtime.ops.registry import normalize_domain


class GradientError(Exception):
    """An operator on the differentiated path has no gradient rule."""


_RULES = {}
_NO_GRADIENT = set()


def gradient(*ops, domain=''):
    """Decorator registering a gradient rule for ``ops``."""
    def register(fn):
        for op in ops:
            key = (normalize_domain(domain), op)
            if key in _RULES or key in _NO_GRADIENT:
                raise ValueError('gradient of %s declared twice' % op)
            _RULES[key] = fn
        return fn
    return register


def no_gradient(*ops, domain=''):
    """Declare that the outputs of ``ops`` carry no gradient."""
    for op in ops:
        key = (normalize_domain(domain), op)
        if key in _RULES or key in _NO_GRADIENT:
            raise ValueError('gradient of %s declared twice' % op)
        _NO_GRADIENT.add(key)


def rule_for(node):
    """The rule for ``node``, None for a declared no-gradient operator."""
    _load_all_families()
    key = (normalize_domain(node.domain), node.op_type)
    if key in _NO_GRADIENT:
        return None
    if key not in _RULES:
        raise GradientError('no gradient rule for operator %s (node %s); declare one in '
                            'chainer_compiler/autodiff/<family>.py'
                            % (node.op_type, node.name or 'unnamed'))
    return _RULES[key]


def differentiable_ops():
    """{'rules': sorted op names with a rule, 'none': sorted no-gradient ops}."""
    _load_all_families()
    return {'rules': sorted(op for _, op in _RULES), 'none': sorted(op for _, op in _NO_GRADIENT)}


_loaded = False


def _load_all_families():
    global _loaded
    if not _loaded:
        _loaded = True
        from . import FAMILIES  # noqa: F401  (imported for its registrations)
