"""Gradient rules, attached to their operators' records (OpRecord.stages
'gradient' and 'forward_rewrite' in runtime/ops/registry.py, beside the
kernel and the native lowering).

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
from ..runtime.ops.registry import attach, operator_record, records, registered_kernels


class GradientError(Exception):
    """An operator on the differentiated path has no gradient rule."""


def gradient(*ops, domain=''):
    """Decorator registering a gradient rule for ``ops``."""
    return attach('gradient', *ops, domain=domain)


def forward_rewrite(*ops, domain=''):
    """Decorator registering the forward rewrite of ``ops`` (see above)."""
    return attach('forward_rewrite', *ops, domain=domain)


def _stage(node, stage):
    _load_all_families()
    record = operator_record(node.op_type, node.domain)
    return None if record is None else record.stages.get(stage)


def forward_rewrite_for(node):
    """The forward rewrite declared for ``node``'s operator, or None."""
    return _stage(node, 'forward_rewrite')


def rule_for(node):
    """The rule for ``node``, None for an operator whose kernel record says
    its outputs carry no gradient."""
    _load_all_families()
    record = operator_record(node.op_type, node.domain)
    if record is not None and not record.differentiable:
        return None
    rule = _stage(node, 'gradient')
    if rule is None:
        raise GradientError('no gradient rule for operator %s (node %s); declare one in '
                            'chainer_compiler/autodiff/<family>.py, or gradient=False on '
                            'its kernel if its outputs carry none'
                            % (node.op_type, node.name or 'unnamed'))
    return rule


def differentiable_ops():
    """{'rules': sorted op names with a rule, 'none': sorted op names whose
    kernel records say their outputs carry no gradient}."""
    _load_all_families()
    return {'rules': sorted(r.op for r in records() if 'gradient' in r.stages),
            'none': sorted({s.op for s in registered_kernels() if not s.record.differentiable})}


_loaded = False


def _load_all_families():
    global _loaded
    if not _loaded:
        _loaded = True
        from . import FAMILIES  # noqa: F401  (imported for its registrations)
