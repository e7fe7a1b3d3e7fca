"""The kernel registry: one entry per (domain, operator, opset-version range).

A kernel is a plain function ``fn(xp, *inputs, **attributes)`` where ``xp`` is
the array module of the backend (numpy or cupy) and the keyword arguments are
the ONNX attributes of the node, under their ONNX names: inputs are positional
parameters, attributes keyword-only ones (after ``*``), and an attribute's
default tells what kind of value it takes (``KernelSpec.attribute_types``).
It returns one array for a single-output operator and a tuple for several.
Omitted optional inputs arrive as ``None``.  A kernel that needs to know how
many outputs the node asks for declares a keyword-only parameter ``n_outputs``.

Operators whose meaning changed between opsets register one kernel per range of
*schema versions* (the ``since_version`` ONNX resolves for the model's opset).

What the other stages need to know about an operator (OpRecord: whether the
recompute policies may replay it and what a replay costs, which inputs its
kernel updates in place, whether its outputs carry a gradient, which nodes must run on the host
under CuPy, whether it draws random numbers, whether output 0 may be a view
of an input, whether a product may apply it as its epilogue, whether it
keeps the samples of a batch apart and which input only sizes its output
(emit-c --max), and for this
project's own operators the names and types of their outputs, from which
their ONNX schemas are made) is declared here too, by keyword arguments of
``@kernel``, so that no stage keeps a private list of operators.  The
attribute defaults are the kernels' keyword defaults (KernelSpec.with_defaults),
and the stages that implement an operator elsewhere (its gradient rule, its
C lowering) attach to the same record (attach), which thus tells what covers it.
"""
import inspect
import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy

from ..backend import device_dtype
from ..errors import UnsupportedOperatorError

#: Schema versions are small integers; this bound means "every later version".
LATEST = 10**6

#: Custom operators of this project (gradient-only kernels and the like).
CUSTOM_DOMAIN = 'org.chainer_compiler'


def normalize_domain(domain):
    """ONNX spells the default domain both '' and 'ai.onnx'; we use ''."""
    return '' if domain in ('', 'ai.onnx') else domain


@dataclass
class OpRecord:
    """What stages other than the kernel need to know about one operator,
    all its versions.  Each fact is declared once, by the keyword argument
    of the same name of ``@kernel`` on any one of the operator's kernels
    (declaring it again differently is an error); None means undeclared,
    and the properties say what that implies."""
    op: str
    domain: str
    #: False: the recompute policies never replay it in the backward program
    #: but keep its outputs (random draws, state it changes, sub-programs).
    recompute: bool | None = None
    #: The work of one run: ``cost(inputs, outputs)`` of the input and
    #: output shapes (tuples of ints, None when unknown) gives it in units of
    #: a convolution's multiply-add (see "costs" below), or None when the
    #: shapes do not tell.  Undeclared:
    #: ELEMENTWISE units per output element (see work()).
    cost: Callable | None = None
    #: The temporaries of one run on NumPy: ``scratch(inputs, outputs,
    #: attributes)``, with ``(dtype, shape)`` per input and output (None
    #: when unknown or omitted, as in the type rules below) and the node's
    #: attributes, gives the most bytes the kernel holds at once beyond its
    #: inputs and outputs, or None when the types do not tell; what the
    #: memory model adds to the VM's count for the process's peak.
    #: Undeclared: none (a result is its only array).
    scratch: Callable | None = None
    #: Positions of the inputs whose arrays the kernel overwrites (the
    #: optimizer updates); validate_program refuses a read of them afterwards.
    in_place: tuple[int, ...] | None = None
    #: False: its outputs carry no gradient (comparisons, shapes, random
    #: draws, optimizer updates); the autodiff treats them as constants.
    gradient: bool | None = None
    #: ``host_only(attributes)`` of a node's attributes: True when the CuPy
    #: executor must run the node on the host, with NumPy (an output of a
    #: dtype CuPy cannot hold, e.g. Cast to float8; an operation CuPy lacks).
    #: Undeclared: never (nodes with host inputs run there anyway).
    host_only: Callable | None = None
    #: True: a run may draw random numbers (Dropout in training mode, the
    #: samplers), so no folder evaluates it ahead of a run and no backward
    #: replays it.  Apart from recompute, which also covers stateful operators.
    random: bool | None = None
    #: k: output 0 may be input k's array (Reshape, Identity; the instances
    #: of Dropout and Cast that compute the identity): a backend may alias
    #: it instead of copying, and whatever tracks memory counts the two as
    #: one array.  Only these may be aliased.
    view_of: int | None = None
    #: True: an activation a product (Conv, Gemm, MatMul) may apply as it
    #: stores its result (the native kernels' epilogue), its float
    #: attribute, if any, as ``activation_alpha``.
    epilogue: bool | None = None
    #: How it treats the samples of a batch, the rows of the first axis of
    #: its inputs and outputs (emit-c --max runs a batch one sample at a
    #: time; runtime/native/batched.py), one of SAMPLES: 'elementwise' (each
    #: output element from the same position of the inputs, broadcasting at
    #: most), 'per_sample' (whenever that axis is the batch, a sample's rows
    #: come from its own rows alone: convolutions, poolings, per-instance
    #: normalizations, batch-first recurrences, reshapes that keep it),
    #: 'reduction' (a Reduce*: rows mix only when it reduces axis 0, by its
    #: ``axes`` attribute or input 1) or 'along_axis' (rows mix only when its
    #: ``axis`` attribute is 0).  Undeclared: it may mix them.
    samples: str | None = None
    #: k: input k only sizes the output (Reshape's and Expand's shape,
    #: Tile's repeats); emit-c --max lets a value computed from the batch
    #: size feed it, and no other input.
    shape_input: int | None = None
    #: This project's operators: the names of the outputs, for the schema.
    outputs: tuple[str, ...] | None = None
    #: This project's operators: the type rule of the outputs (see like()).
    types: Callable | None = None
    #: This project's operators: {attribute: ONNX attribute type ('int',
    #: 'ints', 'float', 'floats', 'string', 'strings')} for the attributes
    #: whose defaults do not tell (required ones, and those defaulting to None).
    attributes: dict[str, str] | None = None
    #: What other stages attach to the operator, by stage: 'gradient' (its
    #: rule, chainer_compiler/autodiff), 'forward_rewrite' and 'native' (its
    #: C lowering, runtime/native).  Filled by their registration decorators
    #: through attach(), so the record answers which stages cover it.
    stages: dict[str, Callable] = field(default_factory=dict, compare=False)

    @property
    def costly(self):
        """Whether it declares its own cost (products, and operators whose
        time per element is not one element-wise pass's)."""
        return self.cost is not None

    def work(self, inputs, outputs):
        """The work of one run (in a convolution's multiply-adds) from the
        input and output shapes: the declared cost, else (or when it cannot
        tell) ELEMENTWISE per output element; unknown shapes count as nothing."""
        known = self.cost(inputs, outputs) if self.cost is not None else None
        if known is not None:
            return known
        return ELEMENTWISE * sum(_elements(shape) or 0 for shape in outputs)

    def scratch_bytes(self, inputs, outputs, attributes):
        """The bytes of the temporaries of one run (see scratch): 0 when
        undeclared or when the types do not tell."""
        known = self.scratch(inputs, outputs, attributes) if self.scratch is not None else None
        return known or 0

    @property
    def recomputable(self):
        """Whether the recompute policies may replay it.  Undeclared: yes in
        the default domain; no elsewhere (this project's operators are
        gradient, training-mode and update kernels: costly or stateful)."""
        return self.domain == '' if self.recompute is None else self.recompute

    @property
    def differentiable(self):
        """Whether its outputs may carry a gradient (undeclared: yes; the
        autodiff then needs a rule for it and names it when there is none)."""
        return self.gradient is not False

    def on_host(self, attributes):
        """Whether the CuPy executor runs a node with ``attributes`` on the
        host (see host_only)."""
        return self.host_only is not None and bool(self.host_only(attributes))

    @property
    def updated_inputs(self):
        """The positions of the inputs the kernel updates in place."""
        return self.in_place or ()


@dataclass(frozen=True)
class KernelSpec:
    """A registered kernel and what the binder needs to know about it."""
    op: str
    domain: str
    versions: tuple
    fn: Callable
    family: str
    accepts_n_outputs: bool
    attribute_names: frozenset  # None when the kernel takes **kwargs
    #: The operator's OpRecord, shared by all its kernels.
    record: OpRecord = field(compare=False)
    #: {attribute: the type(s) its value must have}; ``object`` where any will do.
    attribute_types: dict = field(default_factory=dict, compare=False)
    #: {attribute: its default} for the attributes whose default is a value
    #: (not None): what with_defaults fills in.
    attribute_defaults: dict = field(default_factory=dict, compare=False)

    def accepts(self, version):
        return self.versions[0] <= version <= self.versions[1]

    def with_defaults(self, attributes):
        """``attributes`` with every attribute the node leaves out that has a
        default set to it: the compiler fills them once when it builds the
        Program, so no later stage restates an ONNX default."""
        return {**self.attribute_defaults, **attributes}

    def evaluate(self, args, attributes, n_outputs):
        """The ``n_outputs`` results of the NumPy kernel on ``args`` (trailing
        missing inputs may be None) as arrays, or None when it raises or
        returns too few or anything but arrays: what every constant folder
        (the compiler's and the native emitter's) evaluates with, so that a
        folded value is what the program would compute, and a failure is
        left to run time, where the error names the instruction."""
        args = list(args)
        while args and args[-1] is None:
            args.pop()
        static = dict(attributes)
        if self.accepts_n_outputs:
            static['n_outputs'] = n_outputs
        try:
            result = self.fn(numpy, *args, **static)
        except Exception:
            return None
        results = result if isinstance(result, tuple) else (result,)
        if len(results) < n_outputs or not all(
                isinstance(r, (numpy.ndarray, numpy.generic)) for r in results[:n_outputs]):
            return None
        return [numpy.asarray(r) for r in results[:n_outputs]]


_KERNELS: dict[tuple[str, str], list[KernelSpec]] = {}
_RECORDS: dict[tuple[str, str], OpRecord] = {}


def kernel(op, *, domain='', versions=(1, LATEST), **facts):
    """Decorator registering ``fn`` as the kernel of ``op``.

    ``versions`` is an inclusive range of ONNX schema versions.  ``facts``
    declare the operator's OpRecord fields (``recompute``, ``cost``,
    ``scratch``, ``in_place``, ``gradient``, ``host_only``, ``random``, ``view_of``,
    ``epilogue``, ``samples``, ``shape_input``, ``outputs``, ``types``,
    ``attributes``).
    """
    domain = normalize_domain(domain)
    unknown = sorted(set(facts) - set(_FACTS))
    if unknown:
        raise TypeError('kernel %s: unknown fact %s (known: %s)'
                        % (op, ', '.join(map(repr, unknown)), ', '.join(_FACTS)))
    if facts.get('samples') not in (None,) + SAMPLES:
        raise ValueError('kernel %s: samples=%r, expected one of %s'
                         % (op, facts['samples'], ', '.join(SAMPLES)))
    record = _RECORDS.setdefault((domain, op), OpRecord(op, domain))
    facts = {name: value for name, value in facts.items() if value is not None}
    for name, value in facts.items():
        declared = getattr(record, name)
        if declared is not None and declared != value:
            raise ValueError('kernel %s: %s declared twice, as %r and %r'
                             % (op, name, declared, value))
    for name, value in facts.items():
        setattr(record, name, value)

    def register(fn):
        params = inspect.signature(fn).parameters.values()
        # Inputs arrive positionally, so only keyword-only parameters are attributes.
        attributes = {p.name: _attribute_type(p.default) for p in params
                      if p.kind == p.KEYWORD_ONLY and p.name != 'n_outputs'}
        takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in params)
        defaults = {p.name: list(p.default) if isinstance(p.default, tuple) else p.default
                    for p in params if p.kind == p.KEYWORD_ONLY and p.name != 'n_outputs'
                    and isinstance(p.default, (int, float, str, tuple))}
        spec = KernelSpec(op=op, domain=domain, versions=tuple(versions), fn=fn,
                          family=fn.__module__.rsplit('.', 1)[-1],
                          accepts_n_outputs=any(p.name == 'n_outputs' for p in params),
                          attribute_names=None if takes_kwargs else frozenset(attributes),
                          attribute_types=attributes, attribute_defaults=defaults,
                          record=record)
        entries = _KERNELS.setdefault((domain, op), [])
        for other in entries:
            if not (spec.versions[1] < other.versions[0] or other.versions[1] < spec.versions[0]):
                raise ValueError('kernel %s registered twice for overlapping versions %s and %s'
                                 % (op, other.versions, spec.versions))
        entries.append(spec)
        return fn

    return register


#: The OpRecord fields @kernel declares.
_FACTS = ('recompute', 'cost', 'scratch', 'in_place', 'gradient', 'host_only', 'random',
          'view_of', 'epilogue', 'samples', 'shape_input', 'outputs', 'types', 'attributes')
#: The values of OpRecord.samples.
SAMPLES = ('elementwise', 'per_sample', 'reduction', 'along_axis')


#: (type of an attribute's default, the type(s) its values must have).
_DEFAULT_TYPES = ((int, numbers.Integral), (float, numbers.Real), (str, str),
                  ((tuple, list), (list, tuple)))


def _attribute_type(default):
    """The type(s) an attribute's value must have, read off its default: an
    int default asks for an integer, a float for a number, a str for a str, a
    tuple for a list.  Without a default, or with None, any value will do."""
    for kind, accepted in _DEFAULT_TYPES:
        if isinstance(default, kind):
            return accepted
    return object


def lookup(op, domain='', version=LATEST, node_name=''):
    """Return the KernelSpec for ``op`` at schema ``version`` or raise
    UnsupportedOperatorError naming the operator."""
    _load_all_families()
    for spec in _KERNELS.get((normalize_domain(domain), op), ()):
        if spec.accepts(version):
            return spec
    raise UnsupportedOperatorError(op, normalize_domain(domain), version, node_name)


def fill_defaults(op, domain, version, attributes):
    """``attributes`` of a node of ``op`` at schema ``version`` with its
    kernel's defaults filled in (KernelSpec.with_defaults); a copy as given
    when no kernel implements it."""
    _load_all_families()
    for spec in _KERNELS.get((normalize_domain(domain), op), ()):
        if spec.accepts(version):
            return spec.with_defaults(attributes)
    return dict(attributes)


def has_kernel(op, domain='', version=LATEST):
    _load_all_families()
    return any(s.accepts(version) for s in _KERNELS.get((normalize_domain(domain), op), ()))


def operator_record(op, domain=''):
    """The OpRecord of ``op``, or None when neither a kernel nor another
    stage (attach) knows it."""
    _load_all_families()
    return _RECORDS.get((normalize_domain(domain), op))


def attach(stage, *ops, domain=''):
    """Decorator attaching ``fn`` to the records of ``ops`` as their
    ``stage`` (see OpRecord.stages): the registration of gradient rules and
    native lowerings, beside the kernel as JAX registers rules beside a
    primitive.  An operator no kernel implements (a native-only fusion)
    gets a record of its own.  Attaching twice is an error."""
    def register(fn):
        for op in ops:
            record = _RECORDS.setdefault((normalize_domain(domain), op),
                                         OpRecord(op, normalize_domain(domain)))
            if stage in record.stages:
                raise ValueError('%s of %s attached twice' % (stage, op))
            record.stages[stage] = fn
        return fn
    return register


def records():
    """Every OpRecord (kernels loaded), sorted by domain and operator."""
    _load_all_families()
    return [_RECORDS[key] for key in sorted(_RECORDS)]


def recomputable(op, domain=''):
    """Whether the recompute policies may replay ``op`` (OpRecord.recomputable;
    an operator without a kernel counts as undeclared)."""
    return (operator_record(op, domain) or OpRecord(op, normalize_domain(domain))).recomputable


def draws_random(op, domain=''):
    """Whether a run of ``op`` may draw random numbers (OpRecord.random; an
    operator nothing declares does not)."""
    record = operator_record(op, domain)
    return record is not None and bool(record.random)


def registered_kernels():
    """Every KernelSpec, sorted by domain, operator and version."""
    _load_all_families()
    return sorted((s for specs in _KERNELS.values() for s in specs),
                  key=lambda s: (s.domain, s.op, s.versions))


def node_work(op, domain, inputs, outputs):
    """OpRecord.work of ``op`` (an operator without a kernel counts as
    undeclared): the operations of one run on these shapes."""
    record = operator_record(op, domain) or OpRecord(op, normalize_domain(domain))
    return record.work(inputs, outputs)


# -- host-only nodes ----------------------------------------------------------

def host_dtype(*names):
    """The host_only rule "attribute ``names`` (a NumPy dtype, or an array
    whose dtype counts) give an output a dtype CuPy cannot hold"."""
    def host_only(attributes):
        dtypes = (getattr(attributes.get(name), 'dtype', attributes.get(name)) for name in names)
        return any(isinstance(d, numpy.dtype) and not device_dtype(d) for d in dtypes)
    return host_only


def always(attributes):
    """The host_only rule of kernels written for the host (dictionaries of strings)."""
    return True


# -- costs ---------------------------------------------------------------------
# A cost rule ``cost(inputs, outputs)`` gets one shape per input and output
# (a tuple of ints, None when unknown or omitted) and returns the work in
# units of the time of one multiply-add inside a convolution (im2col and
# GEMM: 0.02 to 0.06 ns measured).  The recompute policies weigh replays by it, so it must be in
# proportion to the VM's time: the factors are the NumPy VM's times per
# element over its time per convolution multiply-add, measured by
# benchmarks/op_costs.py (2026-11-23, this project's 2-core machine; a
# convolution's time per multiply-add varied up to 2.5x between runs there
# with the load on its BLAS threads, the element-wise times much less).

#: The work per output element of one NumPy pass (Add, Mul: 4 to 6 units),
#: what an operator without a cost rule is taken to do.
ELEMENTWISE = 5

#: A BLAS product's (Gemm, MatMul) time per multiply-add, in units
#: (0.3 to 0.5 measured: a convolution also builds its im2col columns).
PRODUCT = 0.4

def _elements(shape):
    """The element count of ``shape``, or None when it is not known."""
    if shape is None or any(not isinstance(d, int) for d in shape):
        return None
    count = 1
    for d in shape:
        count *= d
    return count


def per_element(factor, index=0, of='outputs'):
    """The cost rule "``factor`` units per element of output (or, with
    ``of='inputs'``, input) ``index``": element-wise passes that cost more
    or less than ELEMENTWISE, and 0 for what the VM does without copying."""
    def cost(inputs, outputs):
        shapes = outputs if of == 'outputs' else inputs
        count = _elements(shapes[index] if index < len(shapes) else None)
        return None if count is None else factor * count
    return cost


def scaled(rule, factor):
    """The cost rule ``rule`` times ``factor`` (a product's multiply-adds
    at PRODUCT units each)."""
    def cost(inputs, outputs):
        known = rule(inputs, outputs)
        return None if known is None else factor * known
    return cost


def output_times_input(index, axes):
    """The cost rule "each output element takes as many multiply-adds as
    input ``index`` has elements along ``axes``" (a slice: a convolution's
    weights beyond the output channel, a product's reduced axis)."""
    def cost(inputs, outputs):
        out = _elements(outputs[0] if outputs else None)
        source = inputs[index] if index < len(inputs) else None
        per = _elements(None if source is None else source[axes])
        return None if out is None or per is None else out * per
    return cost


def input_times_input(data, weights, axes):
    """The cost rule "each element of input ``data`` meets the elements of
    input ``weights`` along ``axes``" (a transposed convolution: each input
    pixel spreads over the output channels and the kernel's taps)."""
    def cost(inputs, outputs):
        x = _elements(inputs[data] if data < len(inputs) else None)
        w = inputs[weights] if weights < len(inputs) else None
        per = _elements(None if w is None else w[axes])
        return None if x is None or per is None else x * per
    return cost


def gemm_cost(inputs, outputs):
    """Gemm: output elements times the reduced length (A's size over the
    output's rows, whichever way A is transposed)."""
    out = _elements(outputs[0] if outputs else None)
    a = _elements(inputs[0] if inputs else None)
    if out is None or a is None or not outputs[0]:
        return None
    return out * (a // max(outputs[0][0], 1))


def recurrent_cost(inputs, outputs):
    """RNN, GRU, LSTM: every step of every sequence (X's first two axes)
    multiplies by the input weights W and the recurrent weights R."""
    shapes = list(inputs[:3]) + [None] * (3 - len(inputs[:3]))
    steps = _elements(None if shapes[0] is None else shapes[0][:2])
    w, r = _elements(shapes[1]), _elements(shapes[2])
    return None if None in (steps, w, r) else steps * (w + r)


# -- type rules of this project's operators ------------------------------------
# A type rule ``types(inputs, attributes)`` gives each output's element type
# and shape from the inputs': ``inputs`` holds ``(dtype, shape)`` per input,
# None where it is omitted or untyped, and ``attributes`` the node's
# attributes as the kernel receives them, defaults filled in.  A dtype is
# passed on as given, or named by a NumPy dtype name ('bool'); a shape is a
# tuple of ints, None for an unknown dimension, or None for an unknown rank.
# The rule returns ``(dtype, shape)`` or None (unknown) per output.
# chainer_compiler/custom_schemas.py makes them ONNX inference functions.

def like(*inputs):
    """The type rule "output k has the type and shape of input ``inputs[k]``"."""
    def types(given, attributes):
        return [given[i] if i < len(given) else None for i in inputs]
    return types


def shaped_by(attribute, type_of=0):
    """The type rule of an operator with one output of the element type of
    input ``type_of`` and the shape attribute ``attribute`` holds (gradient
    kernels are given the static shape of what they differentiate)."""
    def types(given, attributes):
        source = given[type_of] if type_of < len(given) else None
        return [None if source is None else (source[0], tuple(attributes[attribute]))]
    return types


def elements(value):
    """The element count of an input's or output's ``(dtype, shape)`` in a
    type or scratch rule, or None when its shape is not known."""
    return None if value is None else _elements(value[1])


def dim(value, axis):
    """Dimension ``axis`` of an input's ``(dtype, shape)`` in a type rule,
    as an int, or None when it is not known (or only symbolic)."""
    if value is None or value[1] is None or axis >= len(value[1]):
        return None
    d = value[1][axis]
    return d if isinstance(d, int) else None


_loaded = False


def _load_all_families():
    # Importing a family module registers its kernels; done once, lazily, so
    # that importing the registry itself stays cheap and cycle-free.
    global _loaded
    if not _loaded:
        _loaded = True
        from . import FAMILIES  # noqa: F401  (import for its side effect)
