"""Peak memory against step time for each recompute policy
(``compile_onnx(..., computation_order=...)``) on ResNet-50, VGG16, a
100-layer MLP and a deep plain CNN, on the NumPy VM and the native backend.

    python benchmarks/memory.py [--models KEY ...] [--policies POLICY ...]
                                [--backends numpy native] [--api onnx step]
                                [--optimizer NAME] [--clock wall|cpu]
                                [--steps N] [--seconds S] [--batch N] [--quick]
                                [--no-rss] [--out benchmarks/out/memory.png]

A POLICY is a ``computation_order`` name ('none' for None) with an
optional memory budget after a colon: a fraction of None's predicted peak
('gt:0.5'), or 'chen', chen's predicted peak in bytes (so 'gt:chen' is gt
at chen's budget, the equal-budget comparison; it needs 'chen' earlier in
the list).  For each model and policy one training step (``cleargrads()``,
forward, softmax cross entropy, backward, the ``--optimizer``'s update)
runs with the VM tracking memory, giving the VM's count (``peak_bytes``) beside the memory model's
prediction (``predicted_peak_bytes``); the predicted real peak is the model's
``predicted_process_peak_bytes`` with the optimizer's state (native rows:
``memory_model.native_process_peak``).  The real peak is what the process
holds: tracemalloc (NumPy reports every array it allocates to it, the
native arenas among them) from before the compiled copy is made to the end
of its second step, so parameters, optimizer state, Chainer's arrays and
kernel scratch count too; the parameters, their gradients and the
optimizer state are given apart, and "above parameters" is the rest.  Each
row also runs in a fresh process for its peak RSS (``--no-rss`` skips it).
Then the same copies of every policy and backend are timed, one step of
each per round (timing.py), for as many rounds as fill ``--seconds``, for
the median step time; gt against chen
at chen's budget is judged round by round, on the median difference.  A
per-operator time split of None against gt (the VM's Tracer) says where
the time goes, and the issue's targets are checked.
Each row runs through ``--api``: 'onnx' (``compile_onnx``: forward and
backward programs, loss and update in Chainer) or 'step'
(``compile_training_step``: forward, loss, backward and update in one
program, each gradient freed once its update has run); by default 'onnx'
for every model and 'step' too for the models whose step rows fit in the
default run (ModelCase.step_by_default).
Writes the plot to ``--out`` and the report as .md and .csv beside it.
"""
import argparse
import contextlib
import copy
import csv
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import chainer.links as L

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from bench import batch_data, initialized_model  # noqa: E402
from timing import CLOCKS, interleaved_samples, timed  # noqa: E402
from training_candidates import OPTIMIZERS, optimizer_update_step  # noqa: E402

import chainer_compiler  # noqa: E402
from chainer_compiler import memory_model  # noqa: E402
from chainer_compiler.runtime import Tracer  # noqa: E402
from chainer_compiler.runtime.errors import RuntimeVMError  # noqa: E402
from chainer_compiler.runtime.native.arena_pool import release_arenas  # noqa: E402

MiB = 2 ** 20
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'out', 'memory.png')
DEFAULT_POLICIES = ['none', 'chen', 'gt', 'dummy', 'gt:0.5', 'gt:0.35', 'gt:0.25', 'gt:chen']
#: The policy whose per-operator time is set beside None's (the first
#: other policy of the run when it is not in the run).
PROFILED_POLICY = 'gt'
#: Models whose per-operator time is split, in order of preference (else
#: the run's first model).
PROFILED_MODELS = ('resnet50',)
#: At most this many timing rounds (one step of every policy each) per model.
MAX_ROUNDS = 200
#: At most this many traced steps per policy: kernel totals settle sooner
#: than a median does, and the traced models are the slow ones.
PROFILE_STEPS = 3
#: (model keys, limit): gt's measured peak at most this fraction of None's,
#: gt's step time at most (1 + limit) times None's, chen's peak at most
#: this fraction of None's.
GT_PEAK = (('resnet50', 'plaincnn', 'mlp100'), 0.50)
GT_TIME = (('resnet50', 'plaincnn', 'mlp100'), 0.30)
CHEN_PEAK = (('resnet50', 'plaincnn', 'mlp100'), 0.60)
MLP_GT_PEAK = (('mlp100',), 0.25)
#: The tracemalloc domain NumPy reports its arrays' data in (NPY_TRACE_DOMAIN).
NUMPY_TRACE_DOMAIN = 389047
#: The memory model's prediction within this fraction of the real peak.
PREDICTION_ERROR = 0.02
BACKENDS = ('numpy', 'native')
#: How the compiled step is made: compile_onnx, or compile_training_step.
APIS = ('onnx', 'step')


@dataclass
class ModelCase:
    """A benchmarked model: its name, what its full size is, constructor,
    input shape (no batch) and batch size, and the tiny variant --quick
    runs instead."""
    name: str
    size: str
    make: Callable
    shape: tuple
    batch: int
    quick_make: Callable
    quick_shape: tuple
    quick_batch: int = 2
    #: Whether the default run has 'step' rows too (the others' take long).
    step_by_default: bool = True


MODELS = {
    'resnet50': ModelCase('ResNet-50', 'width 64', models.ResNet50, (3, 64, 64), 64,
                          lambda: models.ResNet50(width=4, blocks=(1, 1, 1, 1)), (3, 32, 32),
                          step_by_default=False),
    'vgg16': ModelCase('VGG16', 'fc 4096', models.VGG16, (3, 64, 64), 8,
                       lambda: models.VGG16(width=4, fc_width=16, image_size=32), (3, 32, 32),
                       step_by_default=False),
    'mlp100': ModelCase('MLP, 100 layers', 'width 128', models.deep_mlp, (784,), 1024,
                        lambda: models.deep_mlp(depth=10, n_in=16, width=8), (16,), 4),
    'plaincnn': ModelCase('plain CNN', '12 conv-BN-ReLU blocks of 32',
                          lambda: models.DeepPlainCNN(depth=12, channels=32), (3, 32, 32), 32,
                          lambda: models.DeepPlainCNN(depth=3, channels=4), (3, 8, 8)),
}


@dataclass(frozen=True)
class Policy:
    """A policy as given on the command line: ``order`` (None or a
    computation_order name) and ``budget`` (None, a fraction, or 'chen')."""
    name: str
    order: object
    budget: object

    @classmethod
    def parse(cls, text):
        order, _, budget = text.partition(':')
        if not budget:
            return cls(text, None if order == 'none' else order, None)
        if budget == 'chen':
            return cls(text, order, budget)
        try:
            fraction = float(budget)
        except ValueError:
            raise argparse.ArgumentTypeError(
                "policy %r: the budget after ':' is a fraction or 'chen'" % text) from None
        return cls(text, order, fraction)


@dataclass
class Row:
    """One model under one policy on one backend; ``error`` says why it has
    no figures.  ``measured`` is the VM's count (NumPy only), ``real`` the
    process's peak of live bytes (tracemalloc), ``held`` what it holds
    between steps (parameters, optimizer state, gradients, the native
    arena: one buffer the model's programs share),
    ``rss`` the peak RSS of a fresh process running the row and
    ``rss_steps`` how much of it the steps added; ``api``: one of APIS."""
    model: str
    label: str
    policy: Policy
    budget_bytes: int | None = None
    predicted: int | None = None  # of the real peak, the optimizer's state included
    planned: int | None = None  # what gt plans on and budgets bound: the count with scratch
    measured: int | None = None
    param_bytes: int = 0
    samples: list | None = None  # seconds of each timed step, one per round
    error: str | None = None
    none: 'Row | None' = None  # the same model's row without recompute, for the ratios
    backend: str = 'numpy'
    real: int | None = None
    held: int | None = None
    grad_bytes: int = 0
    state_bytes: int = 0
    rss: int | None = None
    rss_steps: int | None = None
    api: str = 'onnx'

    @property
    def where(self):
        """The backend, and the API when it is not compile_onnx."""
        return self.backend if self.api == 'onnx' else '%s, %s' % (self.backend, self.api)

    @property
    def key(self):
        """The row's name among the timed candidates."""
        return '%s/%s' % (self.where, self.policy.name)

    @property
    def peak(self):
        """The peak the targets judge: the real one, else the VM's count."""
        return self.real if self.real is not None else self.measured

    def above_parameters(self):
        """The peak less the parameters and the optimizer state (bytes)."""
        return None if self.peak is None else self.peak - self.param_bytes - self.state_bytes

    def prediction_error(self):
        """(predicted - real) / real, or None."""
        if self.predicted is None or not self.real:
            return None
        return self.predicted / self.real - 1

    @property
    def ms(self):
        """The median step time in milliseconds (None: not timed)."""
        return None if not self.samples else statistics.median(self.samples) * 1e3

    def fraction_of_none(self):
        if self.none is None or self.peak is None or self.none.peak is None:
            return None
        return self.peak / self.none.peak

    def fraction_above_parameters(self):
        """The peak less the parameters, as a fraction of None's: what
        recomputation can act on."""
        if self.none is None or self.peak is None or self.none.peak is None:
            return None
        return self.above_parameters() / self.none.above_parameters()

    def extra_time(self):
        if self.none is None or self.ms is None or self.none.ms is None:
            return None
        return self.ms / self.none.ms - 1


def compiler_kwargs(policy, chen_predicted):
    """``compile_onnx``'s compiler_kwargs for ``policy``; 'chen' budgets
    take chen's predicted peak (None: chen was not run, a ValueError)."""
    if policy.budget is None:
        return {}
    if policy.budget == 'chen':
        if chen_predicted is None:
            raise ValueError("policy %s: the 'chen' budget needs a successful 'chen' policy "
                             "earlier in --policies" % policy.name)
        return {'memory_budget': int(chen_predicted)}
    return {'memory_budget': policy.budget}


def compiled_step(model, onnx_file, policy, kwargs, optimizer='sgd', **runtime_kwargs):
    """(the compiled copy of ``model``, its training step ``step(x, t)`` with
    ``optimizer``), on the NumPy VM unless ``runtime_kwargs`` name a backend.
    The step clears the gradients before the forward, as a memory-conscious
    user does: Chainer's ``Optimizer.update`` clears them only after it, so
    the last step's gradients would live through the forward."""
    compiled = chainer_compiler.compile_onnx(
        copy.deepcopy(model), onnx_file, computation_order=policy.order,
        compiler_kwargs=kwargs, runtime_kwargs={'backend': 'numpy', **runtime_kwargs})
    update = optimizer_update_step(compiled, optimizer)

    def step(x, t):
        compiled.cleargrads()
        return update(x, t)
    return compiled, step


def row_step(row, model, onnx_file, kwargs, x, t, optimizer='sgd', **runtime_kwargs):
    """(what compiled ``model``, its training step ``step(x, t)``, the
    Link whose parameters it trains) for ``row``'s API and backend:
    compiled_step, or ``compile_training_step`` of a Classifier of a copy of
    ``model`` (the batch ``x, t`` fixes its shapes)."""
    runtime_kwargs = {'backend': row.backend, **runtime_kwargs}
    if row.api == 'onnx':
        compiled, step = compiled_step(model, onnx_file, row.policy, kwargs, optimizer,
                                       **runtime_kwargs)
        return compiled, step, compiled
    classifier = L.Classifier(copy.deepcopy(model))
    opt = OPTIMIZERS[optimizer]()
    opt.setup(classifier)
    step = chainer_compiler.compile_training_step(
        classifier, opt, (x, t), runtime_kwargs=runtime_kwargs,
        computation_order=row.policy.order, compiler_kwargs=kwargs)
    return step, step, classifier


def measure_memory(row, model, onnx_file, kwargs, x, t):
    """Fill ``row``'s VM count (NumPy: one tracked step) and its prediction."""
    if row.backend != 'numpy':  # the native backend keeps no count
        return
    compiled, step, _ = row_step(row, model, onnx_file, kwargs, x, t, track_memory=True)
    step(x, t)
    row.measured = compiled.peak_bytes()
    row.planned = planned_peak(row, compiled)


def planned_peak(row, compiled):
    """The peak gt plans on and ``memory_budget`` bounds for ``compiled``'s
    training programs (the step's one program): the VM's count with each
    kernel's scratch."""
    if row.api == 'step':
        return memory_model.program_peak(compiled.program, scratch=True)[0]
    return max(memory_model.compiled_planned_peak(state.programs)
               for state in compiled._training_states())


def predicted_real_peak(row, compiled, x, t):
    """The process's peak as the memory model predicts it (parameters held,
    kernel scratch) with the optimizer's state, less the batch, which the
    process held before tracing began.  compile_onnx's programs do not see
    the optimizer's state or the labels; the step's program takes them as
    inputs, which the caller holds throughout.  Native rows:
    memory_model.native_process_peak, from what the emitted libraries state
    (inputs held through each call, outputs allocated before it, the one
    shared arena buffer, the weights blocks)."""
    if row.api == 'step':
        program = compiled.program
        if row.backend == 'native':
            run = compiled.executor._native  # the Executor's NativeRun
            return memory_model.native_process_peak([(program, run)], [run]) - x.nbytes - t.nbytes
        held = [v.register for v in program.inputs]
        return (memory_model.program_peak(program, held=held, scratch=True)[0]
                - x.nbytes - t.nbytes)
    if row.backend == 'native':
        runs = [e._native for s in compiled._signatures.values() for e in s.executors()]
        return max(memory_model.compiled_native_peak(
            state.programs, state.forward._native, state.backward._native, runs)
            for state in compiled._training_states()) + row.state_bytes - x.nbytes
    return compiled.predicted_process_peak_bytes() + row.state_bytes - x.nbytes


def measure_real(row, model, onnx_file, kwargs, x, t, optimizer):
    """Fill ``row``'s real peak of live bytes and what makes it: tracemalloc
    from before the compiled copy of ``model`` exists (its parameters, the
    native arenas) to the end of its second step (the first one makes the
    optimizer state).  The Python objects compiling left (programs, graphs)
    are not counted: only NumPy's domain, where its arrays' data is, as the
    step starts.  The native arenas are the process's (arena_pool.py): the
    idle ones, which earlier rows' calls sized, are dropped first, so that
    this row's are allocated while traced, as large as its own programs
    ask.  Returns the step, to be timed."""
    release_arenas()
    tracemalloc.start()
    try:
        compiled, step, trained = row_step(row, model, onnx_file, kwargs, x, t, optimizer)
        step(x, t)
        row.held = sum(trace.size for trace in tracemalloc.take_snapshot().traces
                       if trace.domain == NUMPY_TRACE_DOMAIN)
        objects = tracemalloc.get_traced_memory()[0] - row.held
        tracemalloc.reset_peak()
        step(x, t)
        row.real = tracemalloc.get_traced_memory()[1] - objects
    finally:
        tracemalloc.stop()
    params = list(trained.params())
    row.grad_bytes = sum(p.grad.nbytes for p in params if p.grad is not None)
    row.state_bytes = sum(v.nbytes for p in params
                          for v in (p.update_rule.state or {}).values()
                          if hasattr(v, 'nbytes'))
    if row.planned is None:
        row.planned = planned_peak(row, compiled)
    row.predicted = predicted_real_peak(row, compiled, x, t)
    return step


def measure_rss(row, onnx_file, kwargs, args):
    """Fill ``row``'s peak RSS from a fresh process running two of its steps
    (rss_child)."""
    command = [sys.executable, os.path.abspath(__file__), '--rss-child', json.dumps({
        'model': row.model, 'policy': row.policy.name, 'backend': row.backend, 'api': row.api,
        'kwargs': kwargs, 'onnx': onnx_file, 'quick': args.quick, 'batch': args.batch,
        'optimizer': args.optimizer})]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print('rss: %s %s failed: %s' % (row.label, row.key, done.stderr.strip()[-500:]),
              file=sys.stderr)
        return
    result = json.loads(done.stdout.strip().splitlines()[-1])
    row.rss, row.rss_steps = result['peak'], result['peak'] - result['before_steps']


def _max_rss():
    """This process's peak RSS in bytes: Linux's VmHWM, of this program
    alone (ru_maxrss also keeps the peak of the process it was forked
    from), else ru_maxrss (KiB on Linux)."""
    with contextlib.suppress(OSError), open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_child(spec):
    """In a fresh process: compile one row and run two steps; print the peak
    RSS before the steps and after them as JSON."""
    case = MODELS[spec['model']]
    make, shape, batch = _size(case, spec['quick'], spec['batch'])
    x, t = batch_data(shape, batch)
    model = initialized_model(make, x)
    row = Row(spec['model'], '', Policy.parse(spec['policy']), backend=spec['backend'],
              api=spec['api'])
    _, step, _ = row_step(row, model, spec['onnx'], spec['kwargs'], x, t, spec['optimizer'])
    before = _max_rss()
    step(x, t)
    step(x, t)
    print(json.dumps({'before_steps': before, 'peak': _max_rss()}))


def _size(case, quick, batch):
    """(constructor, input shape, batch size) of ``case`` as run."""
    make, shape, own = ((case.quick_make, case.quick_shape, case.quick_batch) if quick
                        else (case.make, case.shape, case.batch))
    return make, shape, batch or own


def bench_model(key, policies, args, work):
    """The rows of one model: memory per policy, then interleaved timing.
    Also returns (model, ONNX file, x, t) for profile_ops."""
    case = MODELS[key]
    make, shape, batch = _size(case, args.quick, args.batch)
    label = '%s, %s, %s, batch %d' % (case.name, 'tiny' if args.quick else case.size,
                                      'x'.join(map(str, shape)), batch)
    x, t = batch_data(shape, batch)
    model = initialized_model(make, x)
    onnx_file = os.path.join(work, '%s.onnx' % key)
    chainer_compiler.export(model, [x], onnx_file)
    param_bytes = sum(p.array.nbytes for p in model.params())
    rows, steps = [], {}
    apis = args.api or (APIS if case.step_by_default else ('onnx',))
    for api in apis:
        for backend in args.backends:
            mine = [Row(key, label, policy, param_bytes=param_bytes, backend=backend, api=api)
                    for policy in policies]
            steps.update(measure_rows(mine, model, onnx_file, x, t, args))
            none = next((r for r in mine if r.policy.order is None and r.error is None), None)
            for row in mine:
                row.none = none
            rows += mine
    calls = {name: (lambda step=step: step(x, t)) for name, step in steps.items()}
    rounds = timing_rounds(calls, args)
    print('timing: %s, %d rows, %d rounds ...' % (label, len(steps), rounds), file=sys.stderr)
    samples = interleaved_samples(calls, budget_s=0.0, min_reps=rounds, max_reps=rounds,
                                  rounds=rounds, clock=args.clock)
    for row in rows:
        row.samples = samples.get(row.key)
    return rows, (model, onnx_file, x, t)


def timing_rounds(calls, args):
    """How many rounds of one step per policy fill ``--seconds``, at least
    ``--steps`` and at most MAX_ROUNDS, from one step of each (the first
    call compiles, so it is not the one timed)."""
    for call in calls.values():
        call()
    round_s = sum(timed(call)[1] for call in calls.values())
    return max(args.steps, min(MAX_ROUNDS, math.ceil(args.seconds / max(round_s, 1e-6))))


def measure_rows(rows, model, onnx_file, x, t, args):
    """Measure each row's peaks (measure_memory, measure_real, measure_rss),
    in order; a row whose policy cannot compile gets the reason as its
    ``error``.  'chen' budgets take chen's predicted peak.  Returns {row
    key: its compiled step} for timing."""
    chen_predicted = None
    steps = {}
    for row in rows:
        print('memory: %s, %s ...' % (row.label, row.key), file=sys.stderr)
        try:
            kwargs = compiler_kwargs(row.policy, chen_predicted)
            row.budget_bytes = kwargs.get('memory_budget')
            measure_memory(row, model, onnx_file, kwargs, x, t)
            steps[row.key] = measure_real(row, model, onnx_file, kwargs, x, t, args.optimizer)
        # A budget no order reaches, no chen run to take it from, or a
        # program the backend refuses (a failed C build: its first error).
        except (ValueError, RuntimeVMError) as e:
            lines = str(e).splitlines()
            row.error = '; '.join(dict.fromkeys(
                [lines[0]] + [line for line in lines if 'error:' in line][:1]))
            continue
        if args.rss:
            measure_rss(row, onnx_file, kwargs, args)
        if row.policy.name == 'chen':
            chen_predicted = row.planned
    return steps


def profile_ops(setup, policies, steps=2):
    """({policy name: {operator: (calls, ms) per step}}, {policy name: mean
    ms per step}) for None and the profiled policy, from the VM's Tracer
    over ``steps`` steps of each, interleaved (as timing.py does, so that
    the machine's load hits both alike), after a first step of each that
    compiles and warms up.  ``setup``: bench_model's (model, ONNX file, x, t)."""
    model, onnx_file, x, t = setup
    chosen = [p for p in policies if p.order is None][:1]
    others = [p for p in policies if p.order is not None and p.budget is None]
    chosen += [p for p in others if p.name == PROFILED_POLICY][:1] or others[:1]
    tracers, steps_of = {}, {}
    for policy in chosen:
        tracers[policy.name] = Tracer(keep_events=False)
        _, steps_of[policy.name] = compiled_step(model, onnx_file, policy, {},
                                                 tracer=tracers[policy.name])
        steps_of[policy.name](x, t)
    # A tracer counts from its creation: subtract the first step.
    before = {name: {op: (n, ms) for op, n, ms in tracer.summary()}
              for name, tracer in tracers.items()}
    seconds = dict.fromkeys(steps_of, 0.0)
    for _ in range(steps):
        for name, step in steps_of.items():
            seconds[name] += timed(lambda step=step: step(x, t))[1]
    split = {name: {op: ((n - before[name].get(op, (0, 0.0))[0]) / steps,
                         (ms - before[name].get(op, (0, 0.0))[1]) / steps)
                    for op, n, ms in tracer.summary()}
             for name, tracer in tracers.items()}
    return split, {name: s * 1e3 / steps for name, s in seconds.items()}


# -- the report -------------------------------------------------------------------

def _mib(nbytes):
    if nbytes is None:
        return 'n/a'
    return ('%.1f' if nbytes >= MiB else '%.2g') % (nbytes / MiB)  # tiny models: 2 digits


def _percent(ratio, signed=False):
    return 'n/a' if ratio is None else ('%+.0f%%' if signed else '%.0f%%') % (100 * ratio)


def _budget(row):
    if row.policy.budget is None:
        return '-'
    if row.policy.budget == 'chen':
        return "chen's (%s MiB)" % _mib(row.budget_bytes)
    return '%.2f of None' % row.policy.budget


#: The table's columns after model, backend (and API), policy and budget.
COLUMNS = ('predicted MiB', 'VM count MiB', 'real MiB', 'predicted / real', 'parameters MiB',
           'optimizer state MiB', 'gradients MiB', 'held between steps MiB',
           'above parameters MiB', '% of None', 'above parameters, % of None',
           'peak RSS MiB (steps add)', 'step ms', '+% time')


def table(rows):
    """The markdown table of every row."""
    lines = ['| model | backend | policy | budget | %s |' % ' | '.join(COLUMNS),
             '|---|---|---|---|%s' % ('---|' * len(COLUMNS))]
    for row in rows:
        if row.error:
            cells = ['**not run**: %s' % row.error.replace('|', '/')] + [''] * (len(COLUMNS) - 1)
        else:
            error = row.prediction_error()
            cells = [_mib(row.predicted), _mib(row.measured), _mib(row.real),
                     'n/a' if error is None else '%.3f' % (1 + error), _mib(row.param_bytes),
                     _mib(row.state_bytes), _mib(row.grad_bytes), _mib(row.held),
                     _mib(row.above_parameters()), _percent(row.fraction_of_none()),
                     _percent(row.fraction_above_parameters()),
                     'n/a' if row.rss is None else '%s (%s)' % (_mib(row.rss),
                                                                 _mib(row.rss_steps)),
                     'n/a' if row.ms is None else '%.1f' % row.ms,
                     _percent(row.extra_time(), signed=True)]
        lines.append('| %s | %s | %s | %s | %s |' % (row.label, row.where, row.policy.name,
                                                     _budget(row), ' | '.join(cells)))
    return '\n'.join(lines)


def _find(rows, model, policy, where='numpy'):
    """The row of ``model`` and ``policy`` that ran where ``where`` says
    (Row.where)."""
    return next((r for r in rows if r.model == model and r.policy.name == policy
                 and r.where == where and r.error is None), None)


def _name(key, where):
    """A model's name in the targets: compile_onnx's NumPy VM rows plain."""
    return MODELS[key].name + ('' if where == 'numpy' else ' (%s)' % where)


def _ratio_target(rows, target, policy, what, backend='numpy'):
    """PASS/MISS lines of ``policy``'s peak or time ratio to None's."""
    keys, limit = target
    lines = []
    for key in keys:
        row = _find(rows, key, policy, backend)
        if row is None:
            continue
        if what == 'peak':
            value = row.fraction_of_none()
            name = '%s peak <= %.0f%% of None\'s' % (policy, 100 * limit)
            measured = '%s (of the peak less the parameters: %s)' % (
                _percent(value), _percent(row.fraction_above_parameters()))
            # A budget is the policy too: the lowest budgeted row that ran counts.
            budgeted = [r for r in rows if r.model == key and r.error is None
                        and r.where == backend and r.policy.order == policy
                        and isinstance(r.policy.budget, float)]
            lowest = min(budgeted, key=Row.fraction_of_none, default=None)
            if lowest is not None and lowest.fraction_of_none() < value:
                measured = '%s with memory_budget %g (%s time); %s without a budget' % (
                    _percent(lowest.fraction_of_none()), lowest.policy.budget,
                    _percent(lowest.extra_time(), signed=True), measured)
                value = lowest.fraction_of_none()
        else:
            value = row.extra_time()
            name = '%s step time <= %+.0f%% of None\'s' % (policy, 100 * limit)
            measured = _percent(value, signed=True)
            # Without a budget gt takes the least peak whatever it costs; at
            # the peak target's budget it trades the rest back for time.
            budgeted = _find(rows, key, '%s:%g' % (policy, GT_PEAK[1]), backend)
            if (budgeted is not None and budgeted.fraction_of_none() <= GT_PEAK[1]
                    and budgeted.extra_time() < value):
                measured = '%s with memory_budget %g (%s of the peak); %s at its least peak ' \
                    '(%s) without a budget' % (
                        _percent(budgeted.extra_time(), signed=True), GT_PEAK[1],
                        _percent(budgeted.fraction_of_none()), measured,
                        _percent(row.fraction_of_none()))
                value = budgeted.extra_time()
        met = value is not None and value <= limit
        lines.append('%s: %s, %s: %s' % ('PASS' if met else 'MISS', name, _name(key, backend),
                                         measured))
    return lines


def targets(rows):
    """The issue's targets, as PASS/MISS lines computed from ``rows``, for
    each backend (and API) that ran."""
    lines = []
    for backend in dict.fromkeys(r.where for r in rows):
        lines += (_ratio_target(rows, GT_PEAK, 'gt', 'peak', backend)
                  + _ratio_target(rows, GT_TIME, 'gt', 'time', backend)
                  + _ratio_target(rows, CHEN_PEAK, 'chen', 'peak', backend)
                  + _ratio_target(rows, MLP_GT_PEAK, 'gt', 'peak', backend)
                  + _chen_budget_targets(rows, backend))
    lines += prediction_targets(rows)
    return lines


def prediction_targets(rows):
    """PASS/MISS lines: the memory model's prediction within
    PREDICTION_ERROR of the real peak, for the rows that have both."""
    lines = []
    for row in rows:
        error = row.prediction_error()
        if row.error is None and error is not None:
            lines.append('%s: predicted within %.0f%% of the real peak, %s, %s: %s MiB '
                         'predicted, %s MiB real (%+.1f%%)'
                         % ('PASS' if abs(error) <= PREDICTION_ERROR else 'MISS',
                            100 * PREDICTION_ERROR, _name(row.model, row.where),
                            row.policy.name, _mib(row.predicted), _mib(row.real), 100 * error))
    return lines


def _chen_budget_targets(rows, backend):
    """PASS/MISS lines: gt at chen's budget no slower than chen."""
    lines = []
    for key in dict.fromkeys(r.model for r in rows):
        chen = _find(rows, key, 'chen', backend)
        gt = next((r for r in rows if r.model == key and r.where == backend
                   and r.policy.name == 'gt:chen'), None)
        if chen is None or chen.ms is None or gt is None:
            continue
        name = 'gt no slower than chen at chen\'s budget, %s' % _name(key, backend)
        if gt.error or gt.ms is None:  # gt cannot even compile under chen's peak
            lines.append('MISS: %s: gt not run: %s' % (name, gt.error))
            continue
        # Side by side in each round: the load of the moment hits both alike.
        differences = [g - c for g, c in zip(gt.samples, chen.samples)]
        median = statistics.median(differences) * 1e3
        lines.append('%s: %s: %.1f ms against %.1f ms; per round, gt minus chen: median %+.1f ms '
                     'over %d rounds, gt faster in %d'
                     % ('PASS' if median <= 0 else 'MISS', name, gt.ms, chen.ms, median,
                        len(differences), sum(d < 0 for d in differences)))
    return lines


def profile_table(split, totals, top=8):
    """Per-operator milliseconds per step of the profiled policies, the
    operators that take the most time (in either) first; the rest summed;
    then the time outside the VM's kernels (Chainer's loss and optimizer,
    the interpreter)."""
    names = list(split)
    ops = sorted({op for s in split.values() for op in s},
                 key=lambda op: -max(s.get(op, (0, 0.0))[1] for s in split.values()))
    lines = ['| operator | %s |' % ' | '.join('%s: calls, ms per step' % n for n in names),
             '|---|' + '---|' * len(names)]

    def cells(pick):
        return ' | '.join(pick(n) for n in names)
    for op in ops[:top]:
        lines.append('| %s | %s |' % (op, cells(
            lambda n, op=op: '%.0f, %.1f' % split[n].get(op, (0, 0.0)))))
    rest = ops[top:]
    lines.append('| %d other operators | %s |' % (len(rest), cells(
        lambda n: '%.1f' % sum(split[n].get(op, (0, 0.0))[1] for op in rest))))
    lines.append('| outside the VM kernels | %s |' % cells(
        lambda n: '%.1f' % (totals[n] - sum(ms for _, ms in split[n].values()))))
    lines.append('| whole step (traced) | %s |' % cells(lambda n: '%.1f' % totals[n]))
    return '\n'.join(lines)


def time_summary(split, totals):
    """One sentence: how much longer the profiled policy's step is than
    None's, and which operators the extra time is in."""
    if len(split) < 2:
        return ''
    base, other = list(split)
    ops = set(split[base]) | set(split[other])
    delta = {op: split[other].get(op, (0, 0.0))[1] - split[base].get(op, (0, 0.0))[1]
             for op in ops}
    grown = sorted((op for op in ops if delta[op] > 0), key=lambda op: -delta[op])[:3]
    return ('%s takes %+.1f ms per step against %s (traced); the kernels that grew most: %s.'
            % (other, totals[other] - totals[base], base,
               ', '.join('%s %+.1f ms' % (op, delta[op]) for op in grown) or 'none'))


def write_csv(rows, path):
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['model', 'backend', 'api', 'policy', 'budget_bytes', 'predicted_bytes',
                         'measured_bytes', 'real_bytes', 'parameter_bytes',
                         'optimizer_state_bytes', 'gradient_bytes', 'held_bytes',
                         'above_parameters_bytes', 'fraction_of_none',
                         'fraction_above_parameters', 'peak_rss_bytes', 'rss_steps_bytes',
                         'step_ms', 'extra_time', 'error'])
        for r in rows:
            writer.writerow([r.label, r.backend, r.api, r.policy.name, r.budget_bytes, r.predicted,
                             r.measured, r.real, r.param_bytes, r.state_bytes, r.grad_bytes,
                             r.held, r.above_parameters(), r.fraction_of_none(),
                             r.fraction_above_parameters(), r.rss, r.rss_steps, r.ms,
                             r.extra_time(), r.error or ''])


def chart(rows, path):
    """One panel per model: peak MiB against step ms, a colour per policy,
    filled circles the real peak (NumPy; triangles native; diamonds and
    down triangles the same through compile_training_step), hollow squares
    predicted."""
    import matplotlib
    matplotlib.use('Agg')  # files only: no display here
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys(r.model for r in rows))
    policies = list(dict.fromkeys(r.policy.name for r in rows))
    markers = {'numpy': 'o', 'native': '^', 'numpy, step': 'D', 'native, step': 'v'}
    palette = plt.get_cmap('tab10')
    colours = {policy: palette(i % palette.N) for i, policy in enumerate(policies)}
    columns = min(2, len(keys))
    rows_of_panels = -(-len(keys) // columns)
    fig, axes = plt.subplots(rows_of_panels, columns, figsize=(6.5 * columns, 4.5 * rows_of_panels),
                             squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, keys):
        mine = [r for r in rows if r.model == key and r.error is None and r.ms is not None]
        for r in mine:
            colour = colours[r.policy.name]
            ax.plot([r.ms], [r.peak / MiB], markers.get(r.where, 'o'), color=colour,
                    label=r.key)
            # Larger, so that a prediction equal to the measurement rings it.
            ax.plot([r.ms], [r.predicted / MiB], 's', markersize=11, markerfacecolor='none',
                    color=colour)
            ax.plot([r.ms, r.ms], [r.peak / MiB, r.predicted / MiB], ':', color=colour)
        if mine:
            ax.axhline(mine[0].param_bytes / MiB, color='grey', linewidth=0.8, linestyle='--',
                       label='parameters')
        ax.set_title(mine[0].label if mine else MODELS[key].name, fontsize=9)
        ax.set_xlabel('median step time (ms)')
        ax.set_ylabel('peak memory (MiB): ● real (▲ native), □ predicted')
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(rows, profile_label, split, totals):
    """The whole report: the table, the targets, the time split."""
    parts = ['## Peak memory and step time per recompute policy', '',
             'One training step: `cleargrads()`, forward, softmax cross entropy, backward, '
             'optimizer update (gradients cleared before the forward, not after it as '
             '`Optimizer.update` does, so the last step\'s do not live through it). '
             'Predicted: the real peak as the memory model predicts it '
             '(`predicted_process_peak_bytes()`: the VM\'s count with the parameters held '
             'and each kernel\'s scratch; native rows: `memory_model.native_process_peak`, '
             'each call\'s inputs, the outputs it allocates first, the shared arena and the '
             'weights blocks) plus the optimizer state, less the input batch '
             '(allocated before tracing); VM count: '
             '`peak_bytes()` of a tracked step (NumPy only); real: the peak of live bytes '
             'tracemalloc saw over the second step of a fresh compiled copy, everything it '
             'holds included (parameters, optimizer state, gradients, native arenas, '
             'Chainer\'s arrays, kernel scratch); held between steps: what it holds after '
             'a step; above parameters: the real peak less the parameters and optimizer '
             'state; peak RSS: a fresh process compiling the row and running two steps (in '
             'brackets: what the steps added above compiling). % of None and the targets '
             'judge the real peak. A budget is a fraction of None\'s predicted VM count '
             '(`predicted_peak_bytes()`), or chen\'s. Step time: median over steps, every '
             'policy and backend interleaved. Rows marked "step" compile the whole step '
             '(loss and update too) with `compile_training_step`: one program, whose '
             'gradients are never Chainer\'s (0 MiB) and die as their update runs.',
             '', table(rows), '', '## Targets', '']
    parts += ['- %s' % line for line in targets(rows)] or ['(none of the targeted rows ran)']
    parts += ['', '## Where the time goes: %s' % profile_label, '',
              'Kernel time per step from the VM\'s Tracer (tracing slows the step a little).',
              '', profile_table(split, totals), '', time_summary(split, totals)]
    return '\n'.join(parts) + '\n'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--models', nargs='+', choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument('--policies', nargs='+', type=Policy.parse,
                        default=[Policy.parse(p) for p in DEFAULT_POLICIES],
                        help="computation_order names, 'none' for None, with an optional "
                             "':FRACTION' or ':chen' budget (default: %s)"
                             % ' '.join(DEFAULT_POLICIES))
    parser.add_argument('--steps', type=int, default=11,
                        help='the fewest timing rounds per model (one step of every policy '
                             'each, after 3 warm-up steps)')
    parser.add_argument('--seconds', type=float, default=30.0,
                        help='timing per model: rounds are added until they fill this '
                             '(at most %d)' % MAX_ROUNDS)
    parser.add_argument('--batch', type=int,
                        help='the batch size of every model (default: each model\'s own)')
    parser.add_argument('--quick', action='store_true',
                        help='tiny variants of the models (a smoke run)')
    parser.add_argument('--backends', nargs='+', choices=BACKENDS, default=list(BACKENDS),
                        help='where the compiled programs run (default: both)')
    parser.add_argument('--api', nargs='+', choices=APIS,
                        help="how the step is compiled: 'onnx' (compile_onnx) and 'step' "
                             "(compile_training_step) (default: onnx, and step for %s)"
                             % ' '.join(k for k, c in MODELS.items() if c.step_by_default))
    parser.add_argument('--optimizer', choices=sorted(OPTIMIZERS), default='momentum',
                        help='the optimizer of the training step (default: momentum, which '
                             'keeps a state as large as the parameters)')
    parser.add_argument('--clock', choices=sorted(CLOCKS), default='wall',
                        help="the step times' clock (timing.py): 'wall' (default) or 'cpu' "
                             "(this process's CPU time, steadier on a loaded machine)")
    parser.add_argument('--no-rss', dest='rss', action='store_false',
                        help='skip the fresh process per row that measures peak RSS')
    parser.add_argument('--rss-child', help=argparse.SUPPRESS)
    parser.add_argument('--out', default=DEFAULT_OUT,
                        help='the plot (PNG); the .md and .csv reports go beside it')
    args = parser.parse_args(argv)
    if args.rss_child:
        return rss_child(json.loads(args.rss_child))
    if args.steps < 2:
        parser.error('--steps must be at least 2')
    if args.batch is not None and args.batch < 1:
        parser.error('--batch must be at least 1')
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    profiled = next((k for k in PROFILED_MODELS if k in args.models), args.models[0])
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for key in args.models:
            model_rows, setup = bench_model(key, args.policies, args, work)
            rows += model_rows
            if key == profiled:
                print('profile: %s ...' % MODELS[key].name, file=sys.stderr)
                profile_label = model_rows[0].label
                split, totals = profile_ops(setup, args.policies,
                                            min(args.steps, PROFILE_STEPS))
    text = markdown(rows, profile_label, split, totals)
    print(text)
    base = os.path.splitext(args.out)[0]
    with open(base + '.md', 'w') as f:
        f.write(text)
    write_csv(rows, base + '.csv')
    chart(rows, args.out)
    print('wrote %s, %s.md and %s.csv' % (args.out, base, base), file=sys.stderr)
    return rows


if __name__ == '__main__':
    main()
