"""Building the backward graph of a forward ONNX graph.

Values are tensors or sequences of tensors.  The gradient of a sequence is
a sequence of the gradients of its elements; two gradients of one sequence
add element by element.  Nodes holding sub-graphs (Loop bodies, If
branches) read outer-scope values without listing them as inputs: those
are their *implicit inputs*, and their rules return gradients for them too,
after those of the listed inputs.
"""
from dataclasses import dataclass, field

import numpy
from onnx import helper, numpy_helper

from .. import memory_model
from ..onnx_builder import GraphBuilder
from ..onnx_graph import (
    SequenceType,
    implicit_inputs,
    reads,
    schema_version,
    value_info,
    value_types,
)
from ..runtime.ops.registry import fill_defaults
from .registry import GradientError, forward_rewrite_for, rule_for

GRAD_PREFIX = 'grad/'


class BackwardBuilder(GraphBuilder):
    """GraphBuilder for gradient rules: knows the static dtype and shape of
    every forward value, and helpers rules share.

    Two versions matter to a rule: what a forward node means depends on its
    schema version (``version(node)``, the one its kernel is picked by);
    which forms the nodes it writes may take depends on the model's opset
    (``opset``, as for every GraphBuilder)."""

    def __init__(self, opset, value_types, forward_names, requires=(), taken=None):
        super().__init__(opset)
        self.value_types = value_types
        #: The forward values a gradient must reach (those that depend on ``wrt``).
        self.requires = set(requires)
        #: What forward rewrites (registry.forward_rewrite) noted, by node name.
        self.notes = {}
        #: The forward node whose rule runs (named by errors).
        self.current = None
        self._shapes = {}
        if taken is not None:  # a sub-graph's builder: names unique with its owner's
            self._taken = taken
        for name in forward_names:
            self.reserve(name)

    def sub_builder(self, types=None):
        """A builder for a sub-graph of this backward graph (a Loop body, an
        If branch): ``types`` (default: the same types), names unique
        across both."""
        sb = BackwardBuilder(self.opset, self.value_types if types is None else types, (),
                             self.requires, self._taken)
        sb.current = self.current
        return sb

    def unique(self, name):
        """Reserve ``name``, or a fresh one like it when taken."""
        return self.fresh(name) if name in self._taken else self.reserve(name)

    def is_sequence(self, name):
        return isinstance(self.value_types.get(name), SequenceType)

    def fresh(self, hint):
        return super().fresh(GRAD_PREFIX + hint)

    def dims(self, name):
        """Shape of forward value ``name`` as inference knows it: a tuple
        of ints, with the symbolic name (a str) or None of each dimension
        known only at run time.  Its rank must be known."""
        entry = self.value_types.get(name)
        if entry is None or entry[1] is None:
            raise GradientError('the rank of %s%s is unknown; its gradient needs it'
                                % (name, self._reader()))
        return tuple(entry[1])

    def shape(self, name):
        """Static shape of forward value ``name`` (a tuple of ints), for
        rules that have no run-time form."""
        shape = self.dims(name)
        if not _is_static(shape):
            raise GradientError('the shape of %s%s is not static (%s); its gradient needs '
                                'fixed shapes' % (name, self._reader(), shape))
        return shape

    def shape_of(self, name):
        """The shape of forward value ``name``: its static shape (a tuple
        of ints) when inference knows it, else the name of its run-time
        Shape (one per value and builder)."""
        shape = self.dims(name)
        if _is_static(shape):
            return shape
        if name not in self._shapes:
            self._shapes[name] = self.node('Shape', [name])
        return self._shapes[name]

    def shape_tensor(self, name):
        """The name of a 1-D int64 tensor holding forward value ``name``'s
        shape: a constant when static, its run-time Shape otherwise."""
        shape = self.shape_of(name)
        return shape if isinstance(shape, str) else self.int64s(shape)

    def dim_of(self, name, axis):
        """Dimension ``axis`` of forward value ``name``: an int when
        static, else the name of a run-time 1-D tensor holding it."""
        size = self.dims(name)[axis]
        if isinstance(size, int):
            return size
        return self.node('Gather', [self.shape_of(name), self.int64s([axis])], axis=0)

    def _reader(self):
        """' (read by OP NAME)' for messages: the forward node whose rule runs."""
        node = self.current
        return '' if node is None else ' (read by %s %s)' % (node.op_type, node.name or
                                                             node.output[0])

    def dtype(self, name):
        return self.value_types[name][0]

    def version(self, node):
        """The schema version forward ``node`` resolves to at the model's
        opset: the since_version of its schema, as kernels are keyed."""
        return schema_version(node, {'': self.opset})

    def attr(self, node, name):
        """Attribute ``name`` of forward ``node``: as written, else the
        default its kernel declares at the node's schema version (the one
        place a default is stated: registry.fill_defaults), else None."""
        for a in node.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                return value.decode() if isinstance(value, bytes) else value
        return fill_defaults(node.op_type, node.domain, self.version(node), {}).get(name)

    def reshape_like(self, x, name):
        """``x`` reshaped to the shape of forward value ``name``."""
        shape = self.shape_of(name)
        if isinstance(shape, str):
            return self.node('Reshape', [x, shape])
        return self.reshape(x, list(shape))

    def sum_to(self, grad, grad_shape, shape, like=None):
        """Undo broadcasting: sum ``grad`` (of ``grad_shape``) down to
        ``shape``.  Shapes are as ``dims`` gives them; where they do not
        tell whether an axis was broadcast (a dimension known only at run
        time that may be 1), the run-time shape of ``like`` (a value of
        ``shape``) decides."""
        grad_shape, shape = tuple(grad_shape), tuple(shape)
        if not (_is_static(grad_shape) and _is_static(shape)):
            return self._sum_to_dynamic(grad, grad_shape, shape, like)
        if grad_shape == shape:
            return grad
        lead = len(grad_shape) - len(shape)
        kept = [lead + i for i, d in enumerate(shape) if d == 1 and grad_shape[lead + i] != 1]
        if lead and not kept:  # only leading axes go (a bias): no Reshape needed
            return self.reduce('ReduceSum', grad, list(range(lead)), keepdims=False)
        axes = list(range(lead)) + kept
        if axes:
            grad = self.reduce('ReduceSum', grad, axes, keepdims=True)
        return self.reshape(grad, shape)

    def _sum_to_dynamic(self, grad, grad_shape, shape, like):
        """sum_to when a shape has run-time dimensions: leading axes are
        summed away, axes of static size 1 summed with keepdims, and axes
        of run-time size not equal (by name) to the gradient's summed where
        ``like``'s size is 1 at run time.  No Reshape: the sums leave
        ``shape`` itself."""
        lead = len(grad_shape) - len(shape)
        if lead:
            grad = self.reduce('ReduceSum', grad, list(range(lead)), keepdims=False)
        pairs = list(enumerate(zip(grad_shape[lead:], shape)))
        ones = [i for i, (g, d) in pairs if d == 1 and g != 1]
        if ones:
            grad = self.reduce('ReduceSum', grad, ones, keepdims=True)
        unknown = [i for i, (g, d) in pairs
                   if not isinstance(d, int) and (d is None or g != d) and g != 1]
        if not unknown:
            return grad
        if like is None or self.opset < 13:
            raise GradientError('undoing a broadcast to %s%s needs the run-time shape of the '
                                'input and opset 13' % (shape, self._reader()))
        axes = self.int64s(unknown)
        sizes = self.node('Gather', [self.shape_of(like), axes], axis=0)
        broadcast = self.node('Equal', [sizes, self.int64s([1])])
        return self.node('ReduceSum', [grad, self.node('Compress', [axes, broadcast], axis=0)],
                         keepdims=1, noop_with_empty_axes=1)

    def zeros_like(self, name, entry=None):
        """Zeros of value ``name``'s type (``entry``, as value_types holds
        them; by default the forward type of ``name``): a constant when its
        shape is static, made from its run-time shape otherwise; for a
        sequence, a sequence of zeros like its elements."""
        entry = self.value_types.get(name) if entry is None else entry
        if entry is None or entry[0] is None:
            raise GradientError('the type of %s is unknown; its gradient needs zeros of it'
                                % name)
        if isinstance(entry, SequenceType):
            element = (entry.dtype, entry.shape)
            return self.map_sequences(lambda sb, x: sb.zeros_like(x, element), [name],
                                      element, hint='zeros_seq')
        dtype, shape = entry
        if shape is not None and _is_static(shape):
            return self.constant(numpy.zeros(shape, dtype), hint='zeros')
        value = numpy_helper.from_array(numpy.zeros((1,), dtype))
        return self.node('ConstantOfShape', [self.node('Shape', [name])], value=value)

    def add_gradients(self, name, a, b):
        """The sum of two gradients ``a`` and ``b`` of forward value ``name``."""
        if self.is_sequence(name):
            return self.map_sequences(lambda sb, x, y: sb.node('Add', [x, y]), [a, b],
                                      self.value_types[name], hint='sum_seq')
        return self.node('Add', [a, b])

    def map_sequences(self, fn, seqs, result_type, hint='map'):
        """A Loop over the elements of the sequences ``seqs`` (of one
        length): the sequence of ``fn(sub_builder, *elements)``, whose
        elements have ``result_type`` (an entry as value_types holds).
        SequenceMap would say this too, but needs opset 17."""
        sb = self.sub_builder()
        i, cond, acc = (sb.fresh(hint + '/' + n) for n in ('i', 'cond', 'acc'))
        elements = [sb.node('SequenceAt', [s, i]) for s in seqs]
        out = sb.node('SequenceInsert', [acc, fn(sb, *elements)])
        cond_out = sb.node('Identity', [cond])
        seq_type = SequenceType(*result_type)
        body = make_graph(sb, hint + '_body',
                          [(i, (numpy.dtype('int64'), ())), (cond, (numpy.dtype(bool), ())),
                           (acc, seq_type)],
                          [(cond_out, (numpy.dtype(bool), ())), (out, seq_type)])
        empty = self.node('SequenceEmpty', [],
                          dtype=helper.np_dtype_to_tensor_dtype(numpy.dtype(result_type[0])))
        length = self.node('SequenceLength', [seqs[0]])
        return self.node('Loop', [length, '', empty], body=body)


@dataclass
class BackwardGraph:
    """The backward half of a training step.

    ``grad_inputs`` pairs each backward input with the forward output whose
    gradient it carries; ``retained`` are the forward values the backward
    graph reads; ``grad_outputs`` maps each differentiated name to the name
    of its gradient, or None when no gradient reaches it.
    """
    nodes: list
    initializers: list
    grad_inputs: list
    retained: list
    grad_outputs: dict
    value_types: dict = field(default_factory=dict)
    #: Beside ``nodes``: the index of the forward node whose gradient rule
    #: made each (None: the renaming of the gradients at the end).  What an
    #: explicit computation order's 'backward' steps name.
    origins: list = field(default_factory=list)
    #: Every forward node's index in the order its gradient rule was
    #: considered (whether it ran or not): reversed, a topological order of
    #: the forward graph that lists the origins' runs in reverse.
    order: list = field(default_factory=list)

    def graph(self, name='backward'):
        """The backward graph as a GraphProto (for dumps and code emission)."""
        types = self.value_types.get
        inputs = [value_info(g, types(f)) for g, f in self.grad_inputs]
        inputs += [value_info(r, _unnamed(types(r))) for r in self.retained]
        outputs = [value_info(g, types(w))
                   for w, g in self.grad_outputs.items() if g is not None]
        return helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)


def _unnamed(entry):
    """``entry`` (a value_types entry) with its symbolic dimensions made
    unknown.  Inference names the dimensions of values the graph computes,
    and may give one name to dimensions that differ at run time (every
    element read from a sequence gets the sequence's): declared on the
    backward program's inputs, the names would be checked as equal."""
    if entry is None or entry[1] is None:
        return entry
    dims = tuple(d if isinstance(d, int) else None for d in entry[1])
    return type(entry)(entry[0], dims) if isinstance(entry, SequenceType) else (entry[0], dims)


def make_graph(b, name, inputs, outputs):
    """A GraphProto of ``b``'s nodes and initializers; ``inputs`` and
    ``outputs`` are (name, value_types entry) pairs."""
    return helper.make_graph(b.nodes, name, [value_info(n, t) for n, t in inputs],
                             [value_info(n, t) for n, t in outputs], b.initializers)


def differentiate(graph, opset, wrt, outputs=None, outer=None):
    """Backward graph of ``graph`` (shape-inferred) for the values ``wrt``
    (inputs or parameters), from gradients of ``outputs`` (default: all
    graph outputs).

    Nodes on the differentiated path whose rule declares a forward rewrite
    (registry.forward_rewrite) are rewritten in ``graph`` first (a Loop
    then also saves what its backward reads).  ``outer``: the
    BackwardBuilder of the graph ``graph`` is a sub-graph of; ``graph``
    then reads its values by name, and the backward's names stay unique
    with its."""
    outputs = [v.name for v in graph.output] if outputs is None else list(outputs)
    types = dict(outer.value_types) if outer is not None else {}
    types.update(value_types(graph))
    requires = {name for name in wrt if _is_float(types, name)}
    for node in graph.node:
        if any(i in requires for i in reads(node)) and _propagates(node):
            requires.update(o for o in node.output if o and _is_float(types, o))

    notes = _rewrite_forward(graph, types, requires)
    forward_names = set(types) | {o for n in graph.node for o in n.output}
    b = BackwardBuilder(opset, types, forward_names, requires,
                        outer._taken if outer is not None else None)
    b.notes = notes
    grads, grad_inputs = {}, []
    grad_of = {}  # gradient -> the forward value it is of, for its size
    for out in outputs:
        if out in requires:
            grads[out] = _grad_name(b, out, outer)
            grad_of[grads[out]] = out
            grad_inputs.append((grads[out], out))

    origins, order = [], []
    for index in _rule_order(graph.node, grads, requires, types):
        order.append(index)
        node = graph.node[index]
        gys = [grads.get(o) if o else None for o in node.output]
        inputs = list(node.input) + implicit_inputs(node)
        if all(g is None for g in gys) or not any(i in requires for i in inputs):
            continue
        rule = rule_for(node)
        if rule is None:
            continue
        b.current = node
        gxs = rule(b, node, gys)
        if len(gxs) != len(inputs):
            raise GradientError('gradient rule of %s returned %d gradients for %d inputs'
                                % (node.op_type, len(gxs), len(inputs)))
        for name, gx in zip(inputs, gxs):
            if gx is None or name not in requires:
                continue
            grads[name] = b.add_gradients(name, grads[name], gx) if name in grads else gx
            grad_of[gx] = grad_of[grads[name]] = name
        origins += [index] * (len(b.nodes) - len(origins))
    _defer_weight_gradients(b.nodes, origins, {o for n in graph.node for o in n.output if o},
                            lambda name: _bytes(types, grad_of.get(name, name)))

    grad_outputs = {}
    for name in wrt:
        g = grads.get(name)
        if g is not None and (outer is not None or g != GRAD_PREFIX + name):
            g = b.node('Identity', [g], [_grad_name(b, name, outer)])
        grad_outputs[name] = g
    origins += [None] * (len(b.nodes) - len(origins))
    origins = _prune(b, [g for g in grad_outputs.values() if g is not None], origins)
    constants = {t.name: t for t in graph.initializer}
    retained = outside_reads(b.nodes, b.initializers, [g for g, _ in grad_inputs], constants)
    return BackwardGraph(b.nodes, b.initializers, grad_inputs, retained, grad_outputs, types,
                         origins, order)


def _rule_order(nodes, grads, requires, types):
    """The indices of the forward ``nodes``, every one, in the order their
    gradient rules run (``grads``: the gradients made so far, which the
    caller fills in between): a node once the rules of all readers of its
    outputs have run; of those, first the one whose rule adds the fewest
    bytes (the first gradients it makes of values forward nodes made, less
    its outputs' gradients, last read there; a weight's gradient is made
    once whatever the order), the latest in forward order on a tie.  On a
    chain this is the reverse forward order.  At a fork (a residual block's
    main branch beside its projection shortcut) the branch that shrinks
    the gradients goes first, so the shortcut's larger input gradient is
    not made until the main branch's are summed."""
    producer = {o: k for k, node in enumerate(nodes) for o in node.output if o}
    feeds = [{producer[name] for name in reads(node) if name in producer} for node in nodes]
    waiting = [0] * len(nodes)
    for sources in feeds:
        for k in sources:
            waiting[k] += 1

    def added(k):
        node = nodes[k]
        new = {name for name in list(node.input) + implicit_inputs(node)
               if name in requires and name in producer and name not in grads}
        return sum(_bytes(types, name) for name in new) - sum(_bytes(types, o)
                                                               for o in node.output if o in grads)

    ready = [k for k, count in enumerate(waiting) if not count]
    while ready:
        k = min(ready, key=lambda k: (added(k), -k))
        ready.remove(k)
        yield k
        for source in feeds[k]:
            waiting[source] -= 1
            if not waiting[source]:
                ready.append(source)


def _defer_weight_gradients(nodes, origins, made, size):
    """Move each backward node whose outputs no other rule's node reads (a
    weight's gradient, such as ConvGradFilter, read only by the final
    renaming) to just before the next node reading all the values forward
    nodes ``made`` that it reads, into that node's run (its origin), where
    those values outweigh the gradients it reads that nothing reads from
    there on (``size``: bytes by name), which then wait for it.  Recompute replays a value right
    before its first read: a block's input, read by its first 1x1
    convolution's weight gradient, would be replayed there and live
    through the other branch's gradients, or beside the partial gradients
    not yet summed, until its next reader."""
    node_reads = [set(reads(node)) for node in nodes]
    read = set().union(*node_reads)
    for i in reversed(range(len(nodes))):
        values = node_reads[i] & made
        if not values or any(o in read for o in nodes[i].output if o):
            continue
        j = next((j for j in range(i + 1, len(nodes)) if values <= node_reads[j]), None)
        if j is None or j == i + 1:
            continue
        waiting = node_reads[i] - made - set().union(*node_reads[j:])
        if sum(map(size, values)) <= sum(map(size, waiting)):
            continue
        for column in (nodes, node_reads):
            column.insert(j - 1, column.pop(i))
        origins.insert(j - 1, origins.pop(i))
        origins[j - 1] = origins[j]


def _bytes(types, name):
    """The bytes of forward value ``name`` (0 where not static)."""
    return memory_model.value_bytes(types.get(name)) or 0


def _grad_name(b, name, outer):
    """The name of the gradient of ``name``: grad/NAME in a graph of its
    own; in a sub-graph a fresh one, leaving grad/NAME to the graph owning
    it (sub-graphs must not shadow their owner's names)."""
    return b.fresh(name) if outer is not None else b.unique(GRAD_PREFIX + name)


def _rewrite_forward(graph, types, requires):
    """Apply the forward rewrites of the nodes a gradient passes through;
    returns what they noted, by the name of the node's first output."""
    notes = {}
    for node in list(graph.node):
        rewrite = forward_rewrite_for(node)
        if rewrite is not None and any(i in requires for i in reads(node)):
            notes[node.output[0]] = rewrite(graph, node, types)
    return notes


def outside_reads(nodes, initializers, grad_inputs, constants):
    """The forward values backward ``nodes`` read without making them (their
    sub-graphs' reads included), in first-read order: the values the
    forward program must retain.  Forward ``constants`` read are appended to
    ``initializers`` instead: copied into the backward graph, not retained
    every step."""
    outside = set(grad_inputs) | {t.name for t in initializers}
    made, retained = set(), []
    for node in nodes:
        for name in reads(node):
            if not name or name in made or name in outside or name in retained:
                continue
            if name in constants:
                initializers.append(constants[name])
                outside.add(name)
            else:
                retained.append(name)
        made.update(node.output)
    return retained


def _prune(b, needed, origins):
    """Drop backward nodes no gradient output depends on (a rule may build
    gradients for inputs that turn out not to need one); returns the
    ``origins`` (one per node) of the nodes kept."""
    needed, kept = set(needed), []
    for node, origin in zip(reversed(b.nodes), reversed(origins)):
        if any(o in needed for o in node.output):
            kept.append((node, origin))
            needed.update(reads(node))
    kept.reverse()
    b.nodes[:] = [node for node, _ in kept]
    b.initializers[:] = [t for t in b.initializers if t.name in needed]
    return [origin for _, origin in kept]


def _is_static(shape):
    """Whether every dimension of ``shape`` (a tuple) is a known int."""
    return all(isinstance(d, int) for d in shape)


def _is_float(types, name):
    dtype = types.get(name, (None, None))[0]
    return dtype is not None and dtype.kind == 'f'


def _propagates(node):
    """False for operators declared to have no gradient."""
    try:
        return rule_for(node) is not None
    except GradientError:
        return True  # reported when the backward pass reaches it


__all__ = ['BackwardBuilder', 'BackwardGraph', 'GRAD_PREFIX', 'differentiate', 'make_graph',
           'outside_reads']
