"""ONNX If and Loop nodes from translated Python branches and loop bodies.

Both come down to one problem: a Python name may be bound to different
values on different paths (the two branches of an ``if``, the value before
a loop and after one more iteration), and the graph needs one value for it
afterwards.  ``merge`` finds a ``Spec`` that covers both: a constant when
both paths agree on it, a tensor of one dtype (axes whose sizes differ
become None), a sequence when lists differ in length, tuples and lists of
those item by item.  ``flatten`` turns a path's value into the ONNX values
the spec needs (in that path's graph), ``unflatten`` rebuilds a Value from
the node's outputs.

None on one path and a tensor on another (``h = None`` before a loop whose
first iteration sets it) merges to a ``MaybeSpec``: a bool "is set" and a
tensor of the other path's type, zeros where the value is None (see
``values.MaybeNone`` for why not ONNX Optional).  The loop's fixpoint
settles the tensor's type like any other carried value's.
"""
from dataclasses import dataclass

import numpy
import onnxruntime
from onnx import helper

from .operators import cast
from .values import (
    Const,
    MaybeNone,
    PyDict,
    PyList,
    PyTuple,
    Sequence,
    Tensor,
    TranslationError,
    constant_value,
    is_constant,
    merge_shapes,
    recorded,
)


class Undefined:
    """A name bound on some paths only: using it afterwards is an error."""

    kind = 'a name bound on some paths only'


# -- specs ------------------------------------------------------------------
class ConstSpec:
    """A value both paths agree on, known at export time."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, ConstSpec) and _same_constant(self.value, other.value)

    def __hash__(self):
        return id(type(self))


@dataclass(frozen=True)
class TensorSpec:
    dtype: numpy.dtype
    shape: tuple


@dataclass(frozen=True)
class SequenceSpec:
    dtype: numpy.dtype
    shape: tuple


@dataclass(frozen=True)
class MaybeSpec:
    """None or a tensor of ``dtype`` and ``shape``: two ONNX values, the
    0-d bool "is set" and the tensor."""
    dtype: numpy.dtype
    shape: tuple

    @property
    def tensor_spec(self):
        return TensorSpec(self.dtype, self.shape)


_IS_SET = TensorSpec(numpy.dtype(numpy.bool_), ())


@dataclass(frozen=True)
class ItemsSpec:
    container: type  # PyList, PyTuple or PyDict
    keys: tuple      # dict keys; range(n) for lists and tuples
    items: tuple


def _same_constant(a, b):
    if a is b:
        return True
    if isinstance(a, numpy.ndarray) or isinstance(b, numpy.ndarray):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _tensor_like(value):
    return isinstance(value, Tensor) or (
        isinstance(value, Const) and isinstance(value.value, (bool, int, float, numpy.generic,
                                                              numpy.ndarray)))


def _tensor_type(value):
    if isinstance(value, Tensor):
        return value.dtype, value.shape
    array = numpy.asarray(value.value)
    if isinstance(value.value, float):
        array = array.astype(numpy.float32)
    return array.dtype, array.shape


def elements(value):
    """(dtype, element shape) of a list or sequence; (None, None) for an
    empty list."""
    if isinstance(value, Sequence):
        return value.dtype, value.element_shape
    dtype, shape = None, 'unset'
    for item in value.items:
        if not _tensor_like(item):
            return 'mixed', None
        d, s = _tensor_type(item)
        if dtype is not None and d != dtype:
            return 'mixed', None
        dtype = d
        shape = s if shape == 'unset' else merge_shapes(shape, s)
    return dtype, (None if shape == 'unset' else shape)


def spec_of(value):
    """The spec of one value on its own."""
    if isinstance(value, Const):
        return ConstSpec(value.value)
    if isinstance(value, Tensor):
        return TensorSpec(value.dtype, value.shape)
    if isinstance(value, Sequence):
        return SequenceSpec(value.dtype, value.element_shape)
    if isinstance(value, MaybeNone):
        return MaybeSpec(value.tensor.dtype, value.tensor.shape)
    if isinstance(value, (PyList, PyTuple)):
        return ItemsSpec(type(value), tuple(range(len(value.items))),
                         tuple(spec_of(v) for v in value.items))
    if isinstance(value, PyDict):
        keys = tuple(value.items)
        return ItemsSpec(PyDict, keys, tuple(spec_of(value.items[k]) for k in keys))
    raise TypeError(value)


def merge(a, b, site, name):
    """A Spec covering value ``a`` and value ``b`` of Python name ``name``."""
    if isinstance(a, Const) and isinstance(b, Const) and _same_constant(a.value, b.value):
        return ConstSpec(a.value)
    if _maybe_none(a, b):
        return _merge_maybe_none(a, b, site, name)
    if _tensor_like(a) and _tensor_like(b):
        (da, sa), (db, sb) = _tensor_type(a), _tensor_type(b)
        if da != db:
            # a Python number takes the tensor's dtype (h = 0; h = h + x)
            if isinstance(a, Const) and not isinstance(b, Const):
                da = db
            elif isinstance(b, Const) and not isinstance(a, Const):
                db = da
            else:
                raise TranslationError(site, "'%s' is %s on one path and %s on another"
                                       % (name, da, db))
        return TensorSpec(numpy.dtype(da), merge_shapes(sa, sb))
    if isinstance(a, PyTuple) and isinstance(b, PyTuple) or \
            isinstance(a, PyList) and isinstance(b, PyList) and len(a.items) == len(b.items):
        if len(a.items) != len(b.items):
            raise TranslationError(site, "'%s' is a tuple of %d items on one path and of %d "
                                   "on another" % (name, len(a.items), len(b.items)))
        return ItemsSpec(type(a), tuple(range(len(a.items))), tuple(
            merge(x, y, site, '%s[%d]' % (name, i))
            for i, (x, y) in enumerate(zip(a.items, b.items))))
    if isinstance(a, PyDict) and isinstance(b, PyDict):
        if set(a.items) != set(b.items):
            raise TranslationError(site, "'%s' has different keys on different paths" % name)
        keys = tuple(a.items)
        return ItemsSpec(PyDict, keys, tuple(merge(a.items[k], b.items[k], site,
                                                   '%s[%r]' % (name, k)) for k in keys))
    if isinstance(a, (PyList, Sequence)) and isinstance(b, (PyList, Sequence)):
        (da, sa), (db, sb) = elements(a), elements(b)
        if 'mixed' in (da, db):
            raise TranslationError(site, "'%s' is a list whose length differs between paths; "
                                   "such a list becomes an ONNX sequence, whose items must "
                                   "all be tensors of one dtype" % name)
        dtype = da if da is not None else db
        if dtype is None:
            raise TranslationError(site, "'%s': cannot tell the dtype of an empty list" % name)
        if da is not None and db is not None and da != db:
            raise TranslationError(site, "'%s' holds %s on one path and %s on another"
                                   % (name, da, db))
        shape = sb if sa is None else (sa if sb is None else merge_shapes(sa, sb))
        return SequenceSpec(numpy.dtype(dtype), shape)
    raise TranslationError(site, "'%s' is %s on one path and %s on another; ch2o needs one "
                           "kind of value after the %s" % (name, a.kind, b.kind,
                                                          'branches or loop'))


def _is_none(value):
    return isinstance(value, Const) and value.value is None


def _maybe_none(a, b):
    """Whether ``a`` and ``b`` merge to a MaybeSpec: None (or a MaybeNone)
    on one path, a tensor, a number or a MaybeNone on the other."""
    def nullable(v):
        return _is_none(v) or isinstance(v, MaybeNone)

    def fits(v):
        return nullable(v) or _tensor_like(v)
    return (nullable(a) or nullable(b)) and fits(a) and fits(b)


def _merge_maybe_none(a, b, site, name):
    """The MaybeSpec of None or a MaybeNone merged with a tensor, number or
    MaybeNone: the tensor parts' merged type."""
    parts = [v.tensor if isinstance(v, MaybeNone) else v for v in (a, b) if not _is_none(v)]
    if len(parts) == 2:
        spec = merge(parts[0], parts[1], site, name)
        dtype, shape = (spec.dtype, spec.shape) if isinstance(spec, TensorSpec) else \
            _tensor_type(parts[0])
    else:
        dtype, shape = _tensor_type(parts[0])
    if shape is None:
        raise TranslationError(site, "'%s' is None on one path and a tensor whose rank "
                               "differs between paths on another" % name)
    return MaybeSpec(numpy.dtype(dtype), shape)


def _maybe_parts(value, spec):
    """(is set, tensor) of ``value`` on one path of a MaybeSpec: zeros of
    the spec's type where it is None."""
    if isinstance(value, MaybeNone):
        return value.is_set, value.tensor
    if _is_none(value):
        zeros = numpy.zeros([1 if d is None else d for d in spec.shape], spec.dtype)
        return Const(False), Const(zeros)
    return Const(True), value


def value_info(name, spec):
    """The ValueInfoProto of a graph input or output of ``spec``."""
    dims = None if spec.shape is None else list(spec.shape)
    elem = helper.np_dtype_to_tensor_dtype(spec.dtype)
    if isinstance(spec, TensorSpec):
        return helper.make_tensor_value_info(name, elem, dims)
    return helper.make_value_info(
        name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, dims)))


def leaves(spec):
    """The tensor and sequence specs in ``spec``, in flattening order."""
    if isinstance(spec, ItemsSpec):
        return [leaf for item in spec.items for leaf in leaves(item)]
    if isinstance(spec, MaybeSpec):
        return [_IS_SET, spec.tensor_spec]
    if isinstance(spec, ConstSpec):
        return []
    return [spec]


def flatten(scope, value, spec, site, own=True):
    """The ONNX names holding ``value`` as ``spec`` asks, made in ``scope``;
    ``own``: give every name a node in ``scope`` (graph outputs of a body
    must be made in it)."""
    if isinstance(spec, ConstSpec):
        return []
    if isinstance(spec, ItemsSpec):
        items = value.items
        values = [items[k] for k in spec.keys]
        return [n for v, s in zip(values, spec.items) for n in flatten(scope, v, s, site, own)]
    if isinstance(spec, MaybeSpec):
        is_set, tensor = _maybe_parts(value, spec)
        return flatten(scope, is_set, _IS_SET, site, own) + \
            flatten(scope, tensor, spec.tensor_spec, site, own)
    if isinstance(spec, TensorSpec):
        if isinstance(value, Const):
            t = scope.const_tensor(numpy.asarray(value.value, spec.dtype))
            made = False  # an initializer: no node of ``scope`` makes it
        else:
            t = cast(scope, value, spec.dtype)
            made = t is not value
        if own and not made:
            t = scope.emit('Identity', [t], t.example)
        return [t.name]
    # a sequence
    if isinstance(value, Sequence):
        if own:
            return [scope.node('Identity', [value.name])]
        return [value.name]
    return [to_sequence(scope, value, spec.dtype, site).name]


def to_sequence(scope, value, dtype, site):
    """A PyList (or Sequence) as a Sequence of ``dtype`` tensors."""
    if isinstance(value, Sequence):
        return value
    tensors = [cast(scope, scope.as_tensor(v, site, 'a list item'), dtype) for v in value.items]
    if not tensors:
        name = scope.node('SequenceEmpty', [], dtype=helper.np_dtype_to_tensor_dtype(dtype))
        return Sequence(name, numpy.dtype(dtype), None, [])
    shape = tensors[0].shape
    for t in tensors[1:]:
        shape = merge_shapes(shape, t.shape)
    name = scope.node('SequenceConstruct', [t.name for t in tensors])
    return Sequence(name, numpy.dtype(dtype), shape, [t.example for t in tensors])


def unflatten(spec, names, example):
    """The Value ``spec`` describes, from the iterator ``names``;
    ``example`` is a value of the path the export-time run takes."""
    if isinstance(spec, ConstSpec):
        return Const(spec.value)
    if isinstance(spec, ItemsSpec):
        if isinstance(example, (PyList, PyTuple, PyDict)):
            examples = [example.items[k] for k in spec.keys]
        else:
            examples = [None] * len(spec.keys)
        items = [unflatten(s, names, e) for s, e in zip(spec.items, examples)]
        if spec.container is PyDict:
            return PyDict(dict(zip(spec.keys, items)))
        return spec.container(items if spec.container is PyList else tuple(items))
    if isinstance(spec, MaybeSpec):
        if example is not None and not isinstance(example, (MaybeNone, Tensor, Const)):
            example = None
        is_set, tensor = _maybe_parts(Const(None) if example is None else example, spec)
        return MaybeNone(unflatten(_IS_SET, names, is_set),
                         unflatten(spec.tensor_spec, names, tensor))
    name = next(names)
    if isinstance(spec, TensorSpec):
        ex = _tensor_example(example, spec)
        return Tensor(name, ex, _fit_shape(spec.shape, ex))
    examples = _sequence_examples(example, spec)
    return Sequence(name, spec.dtype, spec.shape, examples)


def _tensor_example(example, spec):
    if isinstance(example, Tensor):
        return example.example.astype(spec.dtype)
    if isinstance(example, Const):
        return numpy.asarray(example.value, spec.dtype)
    return numpy.zeros([1 if d is None else d for d in spec.shape], spec.dtype)


def _fit_shape(shape, example):
    if shape is None or len(shape) != example.ndim:
        return tuple(None for _ in example.shape)
    return shape


def _sequence_examples(example, spec):
    if isinstance(example, Sequence):
        return list(example.examples)
    if isinstance(example, PyList):
        return [_tensor_example(v, TensorSpec(spec.dtype, ())) for v in example.items]
    return []


def leaf_values(value, spec):
    """The Tensors and Sequences of ``value`` that hold ``spec``'s leaves,
    in flattening order (``value`` made by ``unflatten``)."""
    if isinstance(spec, ConstSpec):
        return []
    if isinstance(spec, ItemsSpec):
        items = [value.items[k] for k in spec.keys]
        return [leaf for v, s in zip(items, spec.items) for leaf in leaf_values(v, s)]
    if isinstance(spec, MaybeSpec):
        return [value.is_set, value.tensor]
    return [value]


def run_on_examples(translation, node, specs):
    """The values of ``node``'s outputs (the leaves of ``specs``, in order)
    when onnxruntime runs it on the examples of the values it reads; None when
    it cannot run.

    A Loop body is translated once, on its first iteration's examples, so
    its outputs' examples would hold one iteration's values (a list
    comprehension's result its first element only).  Running the node
    gives the true ones for carried values, scan outputs and sequences
    alike.  It cannot run when a value it reads has no recorded example,
    and may fail on a path the export-time run does not take (a branch not
    taken, whose examples are only of the right type); such examples
    decide nothing."""
    produced, read = set(), set()
    _names_of(node, produced, read)
    initializers = [t for t in translation.initializers if t.name in read - produced]
    inputs, feeds = [], {}
    for name in sorted(read - produced - {t.name for t in initializers} - {''}):
        value = recorded(name)
        if isinstance(value, Tensor):
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.example.shape)))
            feeds[name] = value.example
        elif isinstance(value, Sequence):
            inputs.append(value_info(name, SequenceSpec(value.dtype, None)))
            feeds[name] = [numpy.asarray(e, value.dtype) for e in value.examples]
        else:
            return None
    leaf_specs = [leaf for spec in specs for leaf in leaves(spec)]
    outputs = [value_info(n, s) for n, s in zip(node.output, leaf_specs)]
    graph = helper.make_graph([node], 'examples', inputs, outputs, initializers)
    opset = helper.make_opsetid('', translation.opset)
    model = helper.make_model(graph, opset_imports=[opset])
    model.ir_version = helper.find_min_ir_version_for([opset])
    try:
        # onnxruntime, not our VM: translators stay independent of the
        # compiler and runtime (tests/test_layering.py); ch2o emits
        # standard operators only, and onnx's ReferenceEvaluator runs no
        # iteration of a Loop whose body reads outer-scope sequences.
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=['CPUExecutionProvider'])
        return session.run(None, feeds)
    except Exception:  # noqa: BLE001 (see above: examples off the export-time path)
        return None


def _names_of(node, produced, read):
    """Add the value names ``node`` (and the graphs in its attributes)
    makes to ``produced`` and those it reads to ``read``."""
    read.update(node.input)
    produced.update(node.output)
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.type == attr.GRAPH else [])
        for graph in graphs:
            produced.update(i.name for i in graph.input)
            read.update(o.name for o in graph.output)
            for inner in graph.node:
                _names_of(inner, produced, read)


def set_examples(leaf_values_, arrays):
    """Give the Tensors and Sequences ``leaf_values_`` the examples
    ``arrays`` (one each, in order)."""
    for leaf, array in zip(leaf_values_, arrays):
        if isinstance(leaf, Sequence):
            leaf.examples = [numpy.asarray(a) for a in array]
        else:
            leaf.example = numpy.asarray(array, leaf.dtype)


def placeholder(scope, spec):
    """A value of ``spec`` for a path where the name is unbound (what a loop
    starts from for a name its body binds first; what a branch that does not
    return gives as the return value)."""
    if isinstance(spec, ConstSpec):
        return Const(spec.value)
    if isinstance(spec, MaybeSpec):
        return Const(None)
    if isinstance(spec, ItemsSpec):
        items = [placeholder(scope, s) for s in spec.items]
        if spec.container is PyDict:
            return PyDict(dict(zip(spec.keys, items)))
        return spec.container(items if spec.container is PyList else tuple(items))
    if isinstance(spec, TensorSpec):
        return scope.const_tensor(numpy.zeros([1 if d is None else d for d in spec.shape],
                                              spec.dtype))
    name = scope.node('SequenceEmpty', [], dtype=helper.np_dtype_to_tensor_dtype(spec.dtype))
    return Sequence(name, spec.dtype, spec.shape, [])


def unchanged(a, b):
    """Whether values ``a`` and ``b`` are the same binding (a name a branch
    or loop body did not touch)."""
    if a is b:
        return True
    if isinstance(a, Const) and isinstance(b, Const):
        return _same_constant(a.value, b.value)
    if type(a) is not type(b) or not isinstance(a, (PyList, PyTuple, PyDict)):
        return False
    if isinstance(a, PyDict):
        return a.items.keys() == b.items.keys() and all(
            unchanged(a.items[k], b.items[k]) for k in a.items)
    return len(a.items) == len(b.items) and all(
        unchanged(x, y) for x, y in zip(a.items, b.items))


def fork(env):
    """A copy of bindings ``env`` whose lists, tuples and dicts are copies
    too (a branch that appends to a list must not change the other
    branch's)."""
    memo = {}

    def copy(value):
        if isinstance(value, (PyList, PyDict, PyTuple)):
            if id(value) not in memo:
                if isinstance(value, PyList):
                    memo[id(value)] = PyList([copy(v) for v in value.items])
                elif isinstance(value, PyTuple):
                    memo[id(value)] = PyTuple(tuple(copy(v) for v in value.items))
                else:
                    memo[id(value)] = PyDict({k: copy(v) for k, v in value.items.items()})
            return memo[id(value)]
        return value
    return {k: copy(v) for k, v in env.items()}


def bound(value):
    """Whether a binding read from an env (None when absent) holds a value."""
    return value is not None and not isinstance(value, Undefined)


def declare(scope, value):
    """Declare the static shapes of the tensors in ``value`` (outputs of a
    Loop or If) in ``scope``'s graph: ONNX shape inference cannot tell that
    a loop-carried value keeps its shape, and training needs static shapes."""
    if isinstance(value, Tensor):
        if all(isinstance(d, int) for d in value.shape):
            scope.value_infos.append(value_info(value.name, TensorSpec(value.dtype, value.shape)))
    elif isinstance(value, (PyList, PyTuple)):
        for item in value.items:
            declare(scope, item)
    elif isinstance(value, PyDict):
        for item in value.items.values():
            declare(scope, item)


def _outputs(scope, value, spec, site):
    """The graph outputs of body ``scope`` holding ``value`` as ``spec``."""
    names = flatten(scope, value, spec, site)
    return [value_info(n, s) for n, s in zip(names, leaves(spec))]


# -- If ----------------------------------------------------------------------
def merge_branches(then_env, else_env, binding, site, optional=()):
    """(the bindings after an If that it need not output: those both
    branches leave alike, Undefined for a name only one binds; the spec of
    each name it outputs).  ``binding(env, name)`` reads a binding; a name
    of ``optional`` bound on one branch only is output all the same (the
    other gives a placeholder: a return value)."""
    known, specs = {}, {}
    for name in list(then_env) + [n for n in else_env if n not in then_env]:
        a, b = binding(then_env, name), binding(else_env, name)
        if not bound(a) or not bound(b):
            present = a if bound(a) else b
            if name in optional and bound(present):
                specs[name] = spec_of(present)
            else:
                known[name] = Undefined()
            continue
        if unchanged(a, b):  # identical across branches: made before them
            known[name] = a
            continue
        specs[name] = merge(a, b, site, name)
    return known, specs


def make_if(outer, cond, branches, specs, site):
    """The If node in ``outer`` on bool Tensor ``cond`` whose then and else
    ``branches`` ((bindings, body Scope) each) output the names of
    ``specs``; returns their Values after it (constants when no tensor
    differs between the branches, and then no node)."""
    graphs = []
    for (env, scope), label in zip(branches, ('then', 'else')):
        outputs = []
        for name, spec in specs.items():
            value = env.get(name)
            outputs.extend(_outputs(scope, value if bound(value) else placeholder(scope, spec),
                                    spec, site))
        graphs.append(helper.make_graph(scope.nodes, outer.fresh(label), [], outputs,
                                        value_info=scope.value_infos))
    n_out = sum(len(leaves(s)) for s in specs.values())
    if n_out == 0:  # nothing differs between the branches that the graph could see
        return {name: Const(spec.value) for name, spec in specs.items()}
    names = outer.node('If', [cond.name], [outer.fresh('if') for _ in range(n_out)],
                       then_branch=graphs[0], else_branch=graphs[1])
    names = iter([names] if isinstance(names, str) else names)
    taken = branches[0][0] if bool(numpy.asarray(cond.example)) else branches[1][0]
    values = {}
    for name, spec in specs.items():
        values[name] = unflatten(spec, names, taken.get(name))
        declare(outer, values[name])
    return values


# -- Loop --------------------------------------------------------------------
#: A Loop's body is translated, then translated again with the values it
#: carries widened to cover what the last translation made of them, until
#: their specs stop changing.  Specs only widen (a constant to a tensor, an
#: axis of fixed size to one of varying size, a list to a sequence, None to
#: maybe-None), each a few times at most, so bodies settle in two or three
#: rounds (one more when a carried value only changes because another did);
#: past this many rounds, translation stops rather than translating the
#: body again and again.
MAX_LOOP_TYPE_ROUNDS = 6


class LoopBody:
    """One translation of a Loop's body: its Scope, the Tensor of the
    iteration number, and ``env``, the bindings it starts from (``initial``,
    the bindings before the loop, with each name of ``specs`` a body input
    of its spec)."""

    def __init__(self, outer, specs, initial, binding):
        self.scope = scope = outer.child()
        self.specs = specs
        self.iteration = Tensor(scope.fresh('iteration'), numpy.int64(0))
        self._cond_in = scope.fresh('cond_in')
        self._inputs = []
        self.env = fork(initial)
        for name, spec in specs.items():
            names = [scope.fresh('carried') for _ in leaves(spec)]
            self._inputs.extend(value_info(n, s) for n, s in zip(names, leaves(spec)))
            self.env[name] = unflatten(spec, iter(names), binding(initial, name))
        self._start = fork(self.env)  # a copy: the body may append to its lists

    def widened(self, out, initial, binding, site, skip=()):
        """The specs covering what the body, ending with bindings ``out``,
        made of the names it rebinds (but those of ``skip``); equal to
        ``self.specs`` once the loop's types have settled."""
        specs = {}
        for name, value in out.items():
            if name in skip or isinstance(value, Undefined):
                continue
            before = self._start.get(name)
            if name in self.specs:
                specs[name] = self.specs[name] if unchanged(before, value) else \
                    merge(before, value, site, name)
            elif before is None or not unchanged(before, value):
                first = binding(initial, name)
                specs[name] = merge(first, value, site, name) if bound(first) else \
                    spec_of(value)
        return specs

    def graph(self, go_on, out, site):
        """The body's GraphProto: it goes on while ``go_on`` (a truth) and
        outputs the carried names' values in bindings ``out``."""
        scope = self.scope
        cond = scope.as_tensor(go_on, site)
        cond = scope.emit('Identity', [cast(scope, cond, numpy.bool_)], cond.example)
        outputs = [value_info(cond.name, _IS_SET)]
        for name, spec in self.specs.items():
            outputs.extend(_outputs(scope, out[name], spec, site))
        inputs = [value_info(self.iteration.name, TensorSpec(numpy.dtype(numpy.int64), ())),
                  value_info(self._cond_in, _IS_SET)] + self._inputs
        return helper.make_graph(scope.nodes, scope.parent.fresh('loop_body'), inputs, outputs,
                                 value_info=scope.value_infos)


def make_loop(body, go_on, out, trip, initial_cond, initial, binding, site):
    """The Loop node running ``body`` (a settled LoopBody ending with
    bindings ``out``, going on while ``go_on``) ``trip`` times (None: no
    bound) while ``initial_cond`` (None: true) holds, in the scope around
    it; returns the carried names' Values after it, whose examples are the
    Loop's run on the examples."""
    graph = body.graph(go_on, out, site)
    outer, specs = body.scope.parent, body.specs
    initial_values = []
    for name, spec in specs.items():
        value = binding(initial, name)
        initial_values.extend(flatten(outer, value if bound(value) else placeholder(outer, spec),
                                      spec, site, own=False))
    trip_name = '' if trip is None else cast(outer, outer.as_tensor(trip, site),
                                             numpy.int64).name
    cond_name = '' if initial_cond is None else cast(
        outer, outer.as_tensor(initial_cond, site), numpy.bool_).name
    results = outer.node('Loop', [trip_name, cond_name] + initial_values,
                         [outer.fresh('loop') for _ in initial_values], body=graph)
    results = [results] if isinstance(results, str) else list(results or [])
    loop_node = outer.nodes[-1]
    ran = (trip is None or int(numpy.asarray(
        trip.example if isinstance(trip, Tensor) else constant_value(trip))) > 0) and (
        initial_cond is None or bool(numpy.asarray(
            initial_cond.example if isinstance(initial_cond, Tensor) else True)))
    names = iter(results)
    values = {}
    for name, spec in specs.items():
        values[name] = unflatten(spec, names, out[name] if ran else binding(initial, name))
        declare(outer, values[name])
    examples = run_on_examples(outer.translation, loop_node, list(specs.values()))
    if examples is not None:
        set_examples([leaf for name, spec in specs.items()
                      for leaf in leaf_values(values[name], spec)], examples)
    return values


__all__ = ['MAX_LOOP_TYPE_ROUNDS', 'ConstSpec', 'ItemsSpec', 'LoopBody', 'MaybeSpec',
           'SequenceSpec', 'TensorSpec', 'Undefined', 'bound', 'constant_value', 'declare',
           'elements', 'flatten', 'fork', 'is_constant', 'leaf_values', 'leaves', 'make_if',
           'make_loop', 'merge', 'merge_branches', 'merge_shapes', 'placeholder',
           'run_on_examples', 'set_examples', 'spec_of', 'to_sequence', 'unchanged',
           'unflatten', 'value_info']
