"""Gradient rules, keyed by (domain, operator).

A rule is ``fn(b, node, grad_outputs) -> grad_inputs``: ``b`` is the
BackwardBuilder collecting the backward graph, ``node`` the forward
NodeProto, ``grad_outputs`` the names of the gradients of its outputs (None
where no gradient flows).  It returns one entry per node input: the name of
that input's gradient, or None.  Rules read forward values by their names;
every forward value a rule reads is retained by the forward program.  A
rule reads ``node`` by its schema version (``b.version(node)``, the version
its kernel is picked by) and writes nodes in the forms the model's opset
allows (``b.opset``).

A rule may also declare a *forward rewrite* (``@forward_rewrite(op)``):
``fn(graph, node, types) -> note``, run on the forward graph before the
backward is built, for each such node a gradient passes through.  It may
change the node and add nodes and outputs (a Loop saves, per iteration,
what its backward reads), records the types of the values it adds in
``types``, and returns a note the rule reads as ``b.notes[node.output[0]]``.

Operators whose outputs carry no gradient (comparisons, shapes, indices ...)
say so in their kernel's record (``gradient=False`` in runtime/ops); any
other operator is differentiable, and one without a rule is an error that
names it.
"""
from ..runtime.ops.registry import normalize_domain, operator_record, registered_kernels


class GradientError(Exception):
    """An operator on the differentiated path has no gradient rule."""


_RULES = {}
_REWRITES = {}


def gradient(*ops, domain=''):
    """Decorator registering a gradient rule for ``ops``."""
    def register(fn):
        for op in ops:
            key = (normalize_domain(domain), op)
            if key in _RULES:
                raise ValueError('gradient of %s declared twice' % op)
            _RULES[key] = fn
        return fn
    return register


def forward_rewrite(*ops, domain=''):
    """Decorator registering the forward rewrite of ``ops`` (see above)."""
    def register(fn):
        for op in ops:
            _REWRITES[(normalize_domain(domain), op)] = fn
        return fn
    return register


def forward_rewrite_for(node):
    """The forward rewrite declared for ``node``'s operator, or None."""
    _load_all_families()
    return _REWRITES.get((normalize_domain(node.domain), node.op_type))


def rule_for(node):
    """The rule for ``node``, None for an operator whose kernel record says
    its outputs carry no gradient."""
    _load_all_families()
    record = operator_record(node.op_type, node.domain)
    if record is not None and not record.differentiable:
        return None
    key = (normalize_domain(node.domain), node.op_type)
    if key not in _RULES:
        raise GradientError('no gradient rule for operator %s (node %s); declare one in '
                            'chainer_compiler/autodiff/<family>.py, or gradient=False on '
                            'its kernel if its outputs carry none'
                            % (node.op_type, node.name or 'unnamed'))
    return _RULES[key]


def differentiable_ops():
    """{'rules': sorted op names with a rule, 'none': sorted op names whose
    kernel records say their outputs carry no gradient}."""
    _load_all_families()
    return {'rules': sorted(op for _, op in _RULES),
            'none': sorted({s.op for s in registered_kernels() if not s.record.differentiable})}


_loaded = False


def _load_all_families():
    global _loaded
    if not _loaded:
        _loaded = True
        from . import FAMILIES  # noqa: F401  (imported for its registrations)
