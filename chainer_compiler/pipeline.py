"""The compiler pipeline: one ordered list of passes per kind of program.

Every way of compiling an ONNX model goes through ``run(kind, model, ...)``:
``build_program`` and ``training.compile_inference`` (kind
``'inference'``), ``training.compile_training`` (``'training'``: a forward
and a backward program) and ``training.compile_step_program``
(``'training_step'``: forward, backward and the optimizer update in one).
``PIPELINES`` spells out, as data, the stages of each kind and the passes
of each stage.  A pass is a function of the Compilation that rewrites it in
place; ``python -m chainer_compiler.pipeline > docs/pipeline.md`` draws the
lot.

Where things plug in:

* a pass: into the stage tuples below (every kind that lists the stage
  runs it);
* a recompute policy: ``recompute.POLICIES``, chosen by
  ``CompilerOptions.computation_order``;
* a backend: ``VM_BACKEND`` holds the stages after which nothing is
  target-independent any more (``lower``: rewrites for the VM; ``emit``:
  code generation, pure, the fusion rules the VM's kernels run, then
  ``validate_program``).  Another backend is
  another such tuple of stages, reading ``Compilation.graphs`` (the
  optimized graphs, one per program) or, appended after ``emit``,
  ``Compilation.programs``.  The native backend (``'native'``) is the
  stages a finished Program goes through to become C
  (runtime.native.emit_c.NATIVE_BACKEND, run by ``emit_c`` on a
  NativeCompilation): it lives in the runtime, so that a saved Program
  compiles to C where only the runtime is installed, and runs the same
  fusion rules as the VM's ``fuse``, each backend those its kernels run
  (runtime/ops/fusion_rules.RULES).
  PIPELINES imports it when its stages are first asked for, so that
  importing the compiler loads none of the native emitter.
"""
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy
import onnx
from onnx import helper, numpy_helper

from . import autodiff, custom_schemas, recompute
from .codegen import emit_program
from .errors import UnsupportedOperatorsError
from .frontend import load_onnx, source_name
from .onnx_graph import all_nodes, opset_versions, reads, schema_version, value_info
from .passes import constant_folding, dead_code, expand_functions, vm_fusion
from .passes.type_inference import infer_with_outer_constants, pin_loop_types
from .runtime.ops.registry import CUSTOM_DOMAIN, has_kernel
from .runtime.validation import validate_program
from .shapes import infer_graph_types, infer_shapes


@dataclass(frozen=True)
class CompilerOptions:
    """How the pipeline compiles (``compile_onnx``'s ``compiler_kwargs``).
    Each field's ``doc`` says what it does (docs/pipeline.md lists them)."""
    computation_order: object = field(default=None, metadata={'doc': (
        'the recompute policy of training programs, a name in `recompute.POLICIES` '
        '(see below); an unknown name is a ValueError')})
    memory_budget: object = field(default=None, metadata={'doc': (
        "`'gt'` only: the most bytes the training step's programs may hold at once "
        '(an int), or a fraction in (0, 1] of the peak without recompute (a float), as '
        'the memory model predicts it; `gt` then recomputes as little as fits. A budget '
        'below the smallest peak `gt` finds is a ValueError stating that peak')})
    chen_segments: object = field(default=None, metadata={'doc': (
        "`'chen'` only: the number of segments (an int; default the square root of the "
        'forward node count, rounded)')})
    retain: object = field(default=None, metadata={'doc': (
        "`'custom'` only (it takes this or `order`): the forward values to retain, a list "
        'of names; backward recomputes every other value it reads')})
    order: object = field(default=None, metadata={'doc': (
        "`'custom'` only (it takes this or `retain`): an explicit computation order, a "
        "list of steps `('forget', value)`, `('forward', node)` and `('backward', node)` "
        '(a node by its index in the forward graph or its name): the values the leading '
        "forgets name are not retained; after them, 'forward' replays a node and 'forget' "
        "drops a value, which may be recomputed again later; the 'backward' steps run "
        "each node's gradient, in the backward graph's order. A step that cannot run is a "
        'ValueError naming it')})
    fold_constants: bool = field(default=True, metadata={'doc': (
        'evaluate nodes whose inputs are all constants at compile time (every `fold` '
        'pass); False keeps them as instructions')})
    fuse: bool = field(default=True, metadata={'doc': (
        "apply the fusion rules whose fused forms the VM's kernels run to the emitted "
        'Programs (the `fuse` pass); False keeps one instruction per node')})

    def __post_init__(self):
        # Checked on construction: a misapplied option fails before compiling.
        recompute.check_options(self)
        if self.retain is not None:  # tuples: the options stay hashable
            object.__setattr__(self, 'retain', tuple(self.retain))
        if self.order is not None:
            object.__setattr__(self, 'order', tuple(tuple(step) for step in self.order))

    @classmethod
    def from_kwargs(cls, kwargs, **given):
        """CompilerOptions from a dict of option names (``compiler_kwargs``).

        ``given``: options also passed as arguments of their own (None: not
        given), such as compile_onnx's ``computation_order``.  An unknown
        name, or one given both ways, is a TypeError naming it.
        """
        kwargs = dict(kwargs or {})
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise TypeError('unknown compiler option(s) %s: the options are %s'
                            % (', '.join(map(repr, unknown)), ', '.join(known)))
        for name, value in given.items():
            if value is not None:
                if name in kwargs:
                    raise TypeError('compiler option %r given twice: as an argument and in '
                                    'compiler_kwargs' % name)
                kwargs[name] = value
        return cls(**kwargs)


@dataclass
class Compilation:
    """One run of a pipeline: what its entry point asks for, and what the
    passes make of it.

    Asked: ``model`` (an ONNX path, bytes or ModelProto; ``load`` replaces
    it by the checked ModelProto), ``options``, ``check`` (run
    onnx.checker), ``name`` (of the program a single-program kind emits),
    ``params`` (initializers that become inputs, after the graph's own),
    and for training ``wrt`` (names to differentiate; default every float
    input), ``state_outputs`` (outputs not differentiated) or
    ``differentiated`` (the outputs that are), ``update`` (the training
    step's OptimizerUpdate).

    Made: ``source`` (how messages name the model), ``opsets``,
    ``backward`` (the autodiff.BackwardGraph), ``order`` (the recompute
    order training runs, as the steps of compiler option `order`),
    ``graphs`` (program name -> the GraphProto it is emitted from, in
    order) and ``programs`` (program name -> Program).
    """
    model: object
    options: CompilerOptions = CompilerOptions()
    check: bool = True
    name: str = 'main'
    params: tuple = ()
    wrt: object = None
    state_outputs: tuple = ()
    differentiated: object = None
    update: object = None
    source: str = '<model>'
    opsets: dict = field(default_factory=dict)
    backward: object = None
    order: object = None
    graphs: dict = field(default_factory=dict)
    programs: dict = field(default_factory=dict)

    def set_model(self, model):
        """Make ``model`` the one program graph (and take its opsets)."""
        self.model = model
        self.opsets = opset_versions(model)
        self.graphs = {self.name: model.graph}

    @property
    def reached(self):
        """The names of ``wrt`` some gradient reaches, in order."""
        return [w for w in self.wrt if self.backward.grad_outputs.get(w) is not None]


def run(kind, model, options=None, **asked):
    """Compile ``model`` as a program of ``kind`` (a key of PIPELINES):
    register this project's ONNX schemas, then run every pass in order.
    ``asked``: the other fields of the Compilation, which is returned."""
    if kind in PROGRAM_KINDS:
        raise ValueError("kind %r compiles a Program, not an ONNX model: "
                         "runtime.native.emit_c runs it" % kind)
    custom_schemas.register_schemas()  # shape inference types the custom ops
    compilation = Compilation(model, options or CompilerOptions(), **asked)
    for _, passes in PIPELINES[kind]:
        for run_pass in passes:
            run_pass(compilation)
    return compilation


def build_program(model, check=True, fold=True, fuse=True):
    """Compile an ONNX model (path, bytes or ModelProto) into a Program.

    Runs the pipeline's 'inference' passes (docs/pipeline.md); ``fold``
    is CompilerOptions.fold_constants, ``fuse`` CompilerOptions.fuse.
    Raises InvalidModelError for a broken model and
    UnsupportedOperatorsError listing every node whose operator has no
    kernel.
    """
    return run('inference', model, CompilerOptions(fold_constants=fold, fuse=fuse),
               check=check).programs['main']


# -- passes (each a function of the Compilation; the first paragraph of its
# -- docstring describes it in docs/pipeline.md) --------------------------------

def load(c):
    """Read the model, run onnx.checker (unless check=False), inline local
    functions and infer shapes (frontend.load_onnx)."""
    c.source = source_name(c.model)
    c.set_model(load_onnx(c.model, check=c.check))


def params_to_inputs(c):
    """Turn the initializers named in `params` into inputs, after the graph's own."""
    graph = c.model.graph
    by_name = {t.name: t for t in graph.initializer}
    missing = [n for n in c.params if n not in by_name]
    if missing:
        raise ValueError('the ONNX graph has no initializer(s) %s' % ', '.join(missing))
    for name in c.params:
        t = by_name[name]
        graph.input.append(helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
        graph.initializer.remove(t)


def expand(c):
    """Expand operators that have no kernel into their ONNX function bodies
    (passes/expand_functions.py)."""
    c.set_model(expand_functions.expand_functions(c.model))


def fold(c):
    """Fold constants with the VM's own kernels, unless `fold_constants` is
    off (passes/constant_folding.py)."""
    if c.options.fold_constants:
        for graph in c.graphs.values():
            constant_folding.fold_constants(graph, c.opsets)


def remove_dead_code(c):
    """Drop nodes no graph output depends on (passes/dead_code.py)."""
    for graph in c.graphs.values():
        dead_code.remove_dead_code(graph)


def check_kernels(c):
    """Raise UnsupportedOperatorsError listing every node, in every graph,
    whose operator has no kernel."""
    missing = [('%s::%s' % (n.domain, n.op_type) if n.domain else n.op_type,
                schema_version(n, c.opsets), n.name or 'unnamed')
               for graph in c.graphs.values() for n in all_nodes(graph)
               if not has_kernel(n.op_type, n.domain, schema_version(n, c.opsets))]
    if missing:
        raise UnsupportedOperatorsError(missing)


def infer_types(c):
    """Infer shapes again on the simplified graph: gradient rules read every value's type.

    A Loop's final values whose initial value and body output share one
    static type get it (ONNX leaves them unknown), and inference runs again
    from there.  Sub-graphs are inferred knowing the outer constants they
    read (passes/type_inference.py)."""
    def infer(model):
        return infer_with_outer_constants(model, lambda m: infer_shapes(m, c.source))

    c.set_model(infer(c.model))
    if pin_loop_types(c.model.graph):
        c.set_model(infer(c.model))


def differentiate(c):
    """Build the backward graph of the `differentiated` outputs for `wrt` (autodiff/)."""
    graph = c.model.graph
    outputs = [v.name for v in graph.output]
    if c.differentiated is None:
        c.differentiated = [o for o in outputs if o not in set(c.state_outputs)]
    for name in c.differentiated:
        if name not in outputs:
            raise ValueError("the graph has no output '%s' (outputs: %s)"
                             % (name, ', '.join(outputs)))
    if c.wrt is None:
        c.wrt = [v.name for v in graph.input if v.type.tensor_type.elem_type in _FLOAT_TYPES]
    c.backward = autodiff.differentiate(graph, c.opsets.get('', 1), list(c.wrt),
                                        outputs=c.differentiated)


_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                onnx.TensorProto.BFLOAT16)


def apply_recompute(c):
    """Apply the `computation_order` policy of recompute.POLICIES to the
    backward graph: it keeps some forward values and replays the forward
    nodes of the others in backward (recompute/)."""
    # A training step (the kind with an optimizer `update`) joins forward and
    # backward in one graph, where replays must write fresh names.
    c.order = recompute.apply(c.model.graph, c.backward, c.options, c.opsets,
                              joined=c.update is not None)


def split_forward_backward(c):
    """Make the forward graph (outputs, then the values backward retains)
    and the backward graph."""
    forward = onnx.GraphProto()
    forward.CopyFrom(c.model.graph)
    known = {v.name for v in forward.output}
    for name in c.backward.retained:
        if name not in known:
            forward.output.append(value_info(name, c.backward.value_types.get(name)))
            known.add(name)
    c.graphs = {'forward': forward, 'backward': c.backward.graph()}


def join_backward(c):
    """Append the backward nodes to the graph, seeded with a gradient of 1
    for the scalar loss."""
    loss = c.differentiated[0]
    if not c.backward.grad_inputs:
        raise ValueError("the loss '%s' does not depend on any parameter" % loss)
    graph = c.model.graph
    for seed, forward_name in c.backward.grad_inputs:
        dtype, shape = c.backward.value_types[forward_name]
        if shape is None or numpy.prod(shape, dtype=int) != 1:
            raise ValueError("the loss '%s' must be a scalar, it has shape %s" % (loss, shape))
        graph.initializer.append(numpy_helper.from_array(numpy.ones(shape, dtype=dtype), seed))
    graph.initializer.extend(c.backward.initializers)
    graph.node.extend(c.backward.nodes)


def add_optimizer_update(c):
    """Update every parameter a gradient reaches in place with the `update`
    operator, whose state and hyperparameters become inputs.

    Each update runs as early as it can: right after the last node that
    reads its parameter or makes or reads its gradient (recompute's replays
    included: they are among the nodes by now).  Its gradient is then
    freed at once rather than living to the end of the step, and as the
    parameter changes in place no reader of it comes after.  None runs
    before the last forward node: a batch the forward refuses changes no
    parameter."""
    graph, update = c.model.graph, c.update
    hyper_inputs = ['optimizer/' + h for h in update.hyperparams]
    for name in hyper_inputs:
        graph.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.DOUBLE, []))
    # The VM drops Identities (remove_identities), and backward names each
    # gradient with one at its end: a copy stands for the value it copies.
    source = {}  # an Identity's output -> the value it copies
    last = {}  # value name -> index of the last other node reading or making it
    for i, node in enumerate(graph.node):
        if node.op_type == 'Identity' and not node.domain:
            source[node.output[0]] = source.get(node.input[0], node.input[0])
            continue
        for name in (*reads(node), *node.output):
            last[source.get(name, name)] = i
    forward_end = len(graph.node) - len(c.backward.nodes) - 1
    after = {}  # node index -> the updates that follow it
    for param in c.reached:
        dtype, shape = c.backward.value_types[param]
        elem = helper.np_dtype_to_tensor_dtype(dtype)
        slots = ['%s/%s' % (param, slot) for slot in update.slots]
        # Slots go before the hyperparameters among the inputs.
        for slot in slots:
            graph.input.insert(len(graph.input) - len(hyper_inputs),
                               helper.make_tensor_value_info(slot, elem, list(shape)))
        grad = c.backward.grad_outputs[param]
        grad = source.get(grad, grad)
        after.setdefault(max(forward_end, last.get(param, -1), last.get(grad, -1)), []).append(
            helper.make_node(update.op, [param, grad] + slots + hyper_inputs,
                             [param + '/updated'], domain=CUSTOM_DOMAIN))
        graph.output.append(helper.make_tensor_value_info(param + '/updated', elem, list(shape)))
    nodes = []
    for i, node in enumerate(graph.node):
        nodes += [node] + after.get(i, [])
    del graph.node[:]
    graph.node.extend(nodes)


def remove_identities(c):
    """Remove Identity nodes: their readers read the source (passes/vm_fusion.py)."""
    for graph in c.graphs.values():
        vm_fusion.remove_identities(graph)


def emit(c):
    """Emit one Program per graph, with liveness-based frees and each
    register typed (codegen.py; the graphs gain only the types of their
    values, from one more shape inference: shapes.infer_graph_types)."""
    def infer(model, source):
        return infer_with_outer_constants(model, lambda m: infer_shapes(m, source))

    for graph in c.graphs.values():
        infer_graph_types(graph, c.opsets, c.source, infer)
    c.programs = {name: emit_program(graph, c.opsets, name=name)
                  for name, graph in c.graphs.items()}


def fuse(c):
    """Fuse each Program's instructions by the rules whose fused forms the
    VM's kernels run: the native backend's rules (runtime/native/fusion.py),
    chosen by runtime/ops/fusion_rules.RULES (passes/vm_fusion.py); unless
    `fuse` is off."""
    if c.options.fuse:
        c.programs = {name: vm_fusion.fuse_program(program)
                      for name, program in c.programs.items()}


def validate(c):
    """Check each Program whole (runtime.validation.validate_program), as the VM will."""
    for name, program in c.programs.items():
        validate_program(program, '%s, %s program' % (c.source, name))


# -- the pipelines ---------------------------------------------------------------

#: Target-independent simplification; ends with every operator checked.
SIMPLIFY = ('simplify', (load, params_to_inputs, expand, fold, remove_dead_code, check_kernels))

#: The VM's backend: the stages that turn optimized graphs into Programs.
VM_BACKEND = (('lower', (remove_identities,)), ('emit', (emit, fuse, validate)))

#: The compiler's kinds of program -> their stages (PIPELINES).
_COMPILER_KINDS = {
    'inference': (SIMPLIFY,) + VM_BACKEND,
    'training': (SIMPLIFY, ('autodiff', (
        infer_types, differentiate, apply_recompute, split_forward_backward, fold,
        check_kernels))) + VM_BACKEND,
    'training_step': (SIMPLIFY, ('autodiff', (
        infer_types, differentiate, apply_recompute, join_backward, add_optimizer_update, fold,
        check_kernels))) + VM_BACKEND,
}


class _Pipelines(Mapping):
    """PIPELINES: the compiler's kinds, then 'native', the native backend
    after any of them (a Program in, C out), whose stages are the native
    emitter's own: imported when asked for, not with this module."""

    def __getitem__(self, kind):
        if kind == 'native':
            from .runtime.native.emit_c import NATIVE_BACKEND
            return NATIVE_BACKEND
        return _COMPILER_KINDS[kind]

    def __iter__(self):
        return iter((*_COMPILER_KINDS, 'native'))

    def __len__(self):
        return len(_COMPILER_KINDS) + 1


#: Kind of program -> its stages, in order: (stage name, passes in order).
PIPELINES = _Pipelines()
#: Kinds whose passes take a Program (emitted by the kinds above), not a model.
PROGRAM_KINDS = ('native',)

#: What each kind makes, and which functions compile it (docs/pipeline.md).
_KINDS = {
    'inference': ('one program computing the graph outputs',
                  '`build_program`, `training.compile_inference` (compile_onnx in evaluation)'),
    'training': ('a forward program (outputs, then the values backward retains) and a '
                 'backward program (gradients of the outputs and the retained values in, '
                 'gradients of `wrt` out)',
                 '`training.compile_training` (compile_onnx under chainer.config.train)'),
    'training_step': ('one program for forward, the gradient of a scalar loss and an '
                      'in-place optimizer update of every parameter',
                      '`training.compile_step_program` (compile_training_step)'),
    'native': ('C sources of a Program that any kind above emitted (static shapes, no '
               "sub-programs), run by the native backend's passes (a NativeCompilation, "
               'not a Compilation)',
               "`runtime.native.emit_c` (`chainer-compiler emit-c`, "
               "`Executor(program, backend='native')`)"),
}


def markdown():
    """docs/pipeline.md: every kind's stages and passes, the passes, the
    options and the recompute policies, all read from this module."""
    lines = [
        '# The compiler pipeline',
        '',
        'Generated from `chainer_compiler/pipeline.py` by `python -m chainer_compiler.pipeline`;',
        'do not edit.',
        '',
        'Every compilation runs one ordered list of passes, chosen by the kind of program.',
        'Each pass rewrites the compilation in place; the stages `lower` and `emit` are the',
        "VM's backend (`VM_BACKEND`), where another backend plugs in. Code generation is pure;",
        "the emitted Programs are fused by the rules whose fused forms the VM's kernels run",
        'and validated as the VM validates them. The native backend (`native`,',
        '`runtime.native.emit_c.NATIVE_BACKEND`) takes such a Program to C with passes of its',
        "own, whose stage times are emit-c's phases (docs/native.md); its `fuse_epilogues`",
        "runs the same fusion rules, those the native kernels run (`fusion_rules.RULES`).",
        '',
    ]
    for kind, stages in PIPELINES.items():
        makes, entry = _KINDS[kind]
        lines += ['## %s' % kind, '', 'Makes %s. Compiled by %s.' % (makes, entry), '', '```']
        for stage, passes in stages:
            lines.append('%-9s %s' % (stage, ' -> '.join(p.__name__ for p in passes)))
        lines += ['```', '']
    lines += ['## Passes', '', '| stage | pass | what it does |', '|---|---|---|']
    lines += ['| %s | `%s` | %s |' % (stage, p.__name__, _summary(p))
              for stage, passes in _stages() for p in passes]
    lines += ['', '## Options', '',
              '`CompilerOptions`, from `compile_onnx(..., compiler_kwargs={...})`; an unknown '
              'name is a TypeError.', '', '| option | default | what it does |', '|---|---|---|']
    lines += ['| `%s` | `%r` | %s |' % (f.name, f.default, f.metadata['doc'])
              for f in dataclasses.fields(CompilerOptions)]
    lines += ['', '## Recompute policies', '',
              '`recompute.POLICIES`, chosen by `computation_order`.', '',
              '| policy | what it does |', '|---|---|']
    lines += ['| `%r` | %s |' % (name, _summary(fn)) for name, fn in recompute.POLICIES.items()]
    return '\n'.join(lines) + '\n'


def _stages():
    """[(stage, the passes it is the first stage to run, over all kinds)],
    stages in pipeline order."""
    order, passes = [], {}
    for stages in PIPELINES.values():
        at = 0
        for stage, stage_passes in stages:
            if stage not in order:
                order.insert(at, stage)
            at = order.index(stage) + 1
            passes.setdefault(stage, []).extend(stage_passes)
    seen, result = set(), []
    for stage in order:
        new = [p for p in dict.fromkeys(passes[stage]) if p not in seen]
        seen.update(new)
        result.append((stage, new))
    return result


def _summary(fn):
    """The first paragraph of ``fn``'s docstring, on one line."""
    return ' '.join((fn.__doc__ or '').strip().split('\n\n')[0].split())


if __name__ == '__main__':
    print(markdown(), end='')
