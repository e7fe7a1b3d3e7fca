"""The foreign-models benchmark (issue 31): ONNX files that PyTorch's two
exporters write for models of torchvision, timm, Hugging Face transformers
and an nn.LSTM, compiled by this project and run on the NumPy VM and the
native backend against onnxruntime.

    python benchmarks/foreign_models.py [--quick] [--models NAME ...]
        [--stages export accept time executable profile] [--budget S]
        [--torch-python .venv-torch/bin/python] [--dir result/foreign]
        [--out benchmarks/out] [--refusals FILE]

Stages, each in child processes (one per file and setting: the thread
count is read when the native library and onnxruntime start):

- export: benchmarks/foreign_export.py in the torch venv writes the files
  into --dir (kept there: a file already exported is not exported again).
- accept: each batch-1 file is compiled (build_program); every instruction
  the native backend refuses is listed (emit_c's list, and every operator
  without a lowering: an instruction after a refused one may have no
  static shapes to be judged by); the VM's and the native backend's
  outputs are compared with onnxruntime's.
- time: native and onnxruntime (and the VM, one thread, quiet, batch 1) on
  the TorchScript export of each model (--time-exporters), at batch 1 and
  (LARGE_BATCH's models) 32, with one thread each and with default threads, each quiet and with one
  competing busy process: medians of timed calls after warm-up, native
  first and onnxruntime last in each setting (onnxruntime's workers spin
  after a run and would starve the native threads' next call); beside the
  busy process also their means (a user's throughput: there a spinning
  pool's calls split into fast ones and ones that wait milliseconds for a
  descheduled worker, and the median sees only the first kind when they
  are the majority).
- executable: ``emit_c`` + ``make -C`` with the emitted Makefile's defaults,
  its ``--iterations`` medians against the in-Python native backend's,
  the two taking turns (EXECUTABLE_ROUNDS).
- profile: per-instruction profiles of the native backend (its profiling
  build) and onnxruntime's per-operator profile, for the three models with
  the worst one-thread ratio at each batch size timed (every model of
  --models when the time stage does not run).

Writes foreign_models.md and foreign_models.json to --out and prints the
markdown; --refusals also writes the refused operators per file.
"""
import argparse
import collections
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy
import onnxruntime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inference_candidates as inference  # noqa: E402
from timing import busy_neighbour, interleaved_samples, repetitions, time_interleaved, timed_calls  # noqa: E402

from chainer_compiler.pipeline import build_program  # noqa: E402
from chainer_compiler.runtime.executor import Executor  # noqa: E402
from chainer_compiler.runtime.native import NativeEmitError, UnsupportedNativeOpsError, emit_c  # noqa: E402
from chainer_compiler.runtime.native.folding import SHAPE_ONLY  # noqa: E402
from chainer_compiler.runtime.native.lowering import lowering_for  # noqa: E402
from chainer_compiler.runtime.profiling import Tracer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTERS = ('torchscript', 'dynamo')
#: The models of foreign_export.MODELS (that module needs torch: not
#: imported here), in its order; --quick takes QUICK.
MODELS = ('resnet18', 'resnet50', 'vgg11', 'mobilenet_v2', 'mobilenet_v3_small', 'mnasnet1_0',
          'efficientnet_b0', 'ghostnet_100', 'mixnet_s', 'efficientnet_lite0', 'mobilevit_xxs',
          'deit_tiny', 'deeplabv3', 'fcn_resnet50', 'bert', 'distilbert', 'gpt2', 'vit',
          'whisper_encoder', 'lstm', 'shufflenet_v2', 'squeezenet1_1', 'densenet121',
          'mobilenet_v3_large', 'mnasnet0_5', 'regnet_y_400mf', 'convnext_tiny', 'lcnet_050',
          'lraspp', 'albert')
QUICK = ('resnet18', 'mobilenet_v2', 'bert')
#: The models exported and timed at the batch sizes above 1 (--batches):
#: all but VGG-11, FCN-ResNet-50 and Whisper, whose calls take seconds at
#: batch 32 on one thread (minutes a setting), and GPT-2, whose TorchScript
#: export fails (the larger batches are TorchScript files only).
LARGE_BATCH = ('resnet18', 'resnet50', 'mobilenet_v2', 'mobilenet_v3_small', 'mnasnet1_0',
               'efficientnet_b0', 'ghostnet_100', 'mixnet_s', 'efficientnet_lite0',
               'mobilevit_xxs', 'deit_tiny', 'deeplabv3', 'bert', 'distilbert', 'vit', 'lstm',
               'shufflenet_v2', 'squeezenet1_1', 'densenet121', 'mobilenet_v3_large',
               'mnasnet0_5', 'regnet_y_400mf', 'convnext_tiny', 'lcnet_050', 'lraspp', 'albert')
#: Single-input CNNs whose emitted executable is built and timed.
EXECUTABLES = ('resnet18', 'mobilenet_v2', 'efficientnet_b0')
#: Rounds in which the executable and the in-Python backend take turns: on
#: a shared machine, spells of seconds in which one process's two threads
#: run at one thread's speed (cache lines between its CPUs take 4x as
#: long) must fall on both.
EXECUTABLE_ROUNDS = 6
#: Thread settings: None is the default of each (the machine's cores).
THREADS = (1, None)
#: The environment variables that set the native backend's thread count:
#: its thread pool's, and OpenMP's (what the kernels used before the pool).
THREAD_VARIABLES = ('CHAINER_COMPILER_THREADS', 'OMP_NUM_THREADS')
#: Outputs agree when the largest difference is at most this fraction of
#: the reference's largest magnitude (random weights: outputs of any scale).
RELATIVE_TOLERANCE = 1e-3


def file_name(name, exporter, batch):
    """foreign_export.file_name."""
    return '%s.%s.b%d.onnx' % (name, exporter, batch)


# -- in the child processes -------------------------------------------------

def load_inputs(directory, name, batch, program):
    """{program input name: array} from foreign_export's NAME.bBATCH.npz,
    matched in graph-input order."""
    with numpy.load(os.path.join(directory, '%s.b%d.npz' % (name, batch))) as data:
        arrays = [data['input_%d' % k] for k in range(len(data.files))]
    if len(arrays) != len(program.inputs):
        raise ValueError('%d example inputs for %d graph inputs' % (len(arrays),
                                                                     len(program.inputs)))
    return {v.name: a.astype(v.dtype, copy=False) for v, a in zip(program.inputs, arrays)}


def ort_session(path, threads):
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = options.inter_op_num_threads = threads
    return onnxruntime.InferenceSession(path, options, providers=['CPUExecutionProvider'])


def ort_call(session, inputs):
    """onnxruntime on ``inputs`` (the Program's, in the same order)."""
    feed = dict(zip((i.name for i in session.get_inputs()), inputs.values()))
    return lambda: session.run(None, feed)


def native_call(executor, inputs):
    return lambda: list(executor.run(inputs).values())


def relative_error(reference, outputs):
    """Largest difference over all outputs, relative to the largest
    reference magnitude; inf when the outputs do not correspond."""
    if len(reference) != len(outputs):
        return float('inf')
    worst = 0.0
    for r, o in zip(reference, outputs):
        r, o = numpy.asarray(r, dtype=numpy.float64), numpy.asarray(o, dtype=numpy.float64)
        if r.shape != o.shape:
            return float('inf')
        if r.size:
            worst = max(worst, float(numpy.max(numpy.abs(r - o))) /
                        max(float(numpy.max(numpy.abs(r))), 1e-30))
    return worst


def native_refusals(program):
    """[(operator, reason)] of every instruction the native backend
    refuses: emit_c's list (an instruction whose input comes from a refused
    one has no static shapes and is not judged there), then each further
    instruction whose operator has no lowering at all."""
    found = []
    with tempfile.TemporaryDirectory() as directory:
        try:
            emit_c(program, directory, weights='file')
        except UnsupportedNativeOpsError as e:
            found = [(re.match(r'instruction \d+ \(([^,)]+)', what).group(1), reason)
                     for _, what, reason in e.problems]
        except NativeEmitError as e:
            found = [('(emit)', ' '.join(str(e).split()))]
    if not found:
        return found
    listed = {op for op, _ in found} | SHAPE_ONLY  # (those are folded)
    for inst in program.instructions:
        if inst.qualified_op not in listed and lowering_for(inst.op, inst.domain) is None:
            listed.add(inst.qualified_op)
            found.append((inst.qualified_op, 'no C kernel (after a refused instruction; '
                                             'unless folded at emit time)'))
    return found


def _one_line(e):
    return ' '.join(('%s: %s' % (type(e).__name__, e)).split())[:300]


def accept_worker(args):
    """Compile, list the refusals, and compare the VM and native with onnxruntime."""
    path = os.path.join(args.dir, file_name(args.model, args.exporter, 1))
    row = {}
    try:
        program = build_program(path)
    except Exception as e:  # the finding is the compile error
        return {'compile_error': _one_line(e)}
    row['instructions'] = len(program.instructions)
    row['operators'] = sorted({inst.qualified_op for inst in program.instructions})
    inputs = load_inputs(args.dir, args.model, 1, program)
    reference = ort_call(ort_session(path, None), inputs)()
    try:
        row['vm_error'] = relative_error(reference, native_call(
            Executor(program, backend='numpy'), inputs)())
    except Exception as e:  # the finding is the VM's failure
        row['vm_failure'] = _one_line(e)
    row['refused'] = native_refusals(program)
    if not row['refused'] and not args.refusals_only:
        try:
            row['native_error'] = relative_error(reference, native_call(
                Executor(program, backend='native'), inputs)())
        except Exception as e:  # the finding is the native failure
            row['native_failure'] = _one_line(e)
    return row


def _samples_ms(fn, budget_s):
    # One candidate at a time: the min_reps keep batch 32's calls of seconds bounded.
    return [1e3 * t for t in interleaved_samples({'fn': fn}, budget_s=budget_s, min_reps=3,
                                                 rounds=1)['fn']]


def time_worker(args):
    """Median ms of native and onnxruntime (and the VM, one thread, batch 1),
    quiet and busy (and their mean ms busy, as `busymean`), at the thread
    count this process was started with; with default threads also
    native_2t_over_1t_busy, their ratio to one thread timed interleaved in
    this process."""
    threads = None if args.threads == 0 else args.threads
    path = os.path.join(args.dir, file_name(args.model, args.exporter, args.batch))
    program = build_program(path)
    inputs = load_inputs(args.dir, args.model, args.batch, program)
    candidates = {'native': native_call(Executor(program, backend='native'), inputs),
                  'onnxruntime': ort_call(ort_session(path, threads), inputs)}
    if threads == 1 and args.batch == 1:
        candidates = {'vm': native_call(Executor(program, backend='numpy'), inputs),
                      **candidates}
    ms = {}
    for load in ('quiet', 'busy'):
        with busy_neighbour(load == 'busy'):
            for impl, fn in candidates.items():
                if impl != 'vm' or load == 'quiet':
                    samples = _samples_ms(fn, args.budget)
                    ms['%s_%s' % (impl, load)] = statistics.median(samples)
                    if load == 'busy':
                        ms['%s_busymean' % impl] = statistics.mean(samples)
            if threads is None and load == 'busy':
                # The second thread's worth: default threads against one in
                # this process, round by round beside the same neighbour (two
                # processes minutes apart differ more by the machine's load).
                pair = time_interleaved({'default': candidates['native'], 'one': native_call(
                    Executor(program, backend='native', threads=1), inputs)},
                    budget_s=args.budget, min_reps=3, rounds=10)
                ms['native_2t_over_1t_busy'] = pair['default'] / pair['one']
    return {'ms': ms}


def executable_worker(args):
    """The emitted C built with its Makefile's defaults into
    ``args.build_dir`` (unless an earlier worker did), timing itself,
    against the in-Python native backend in this process: medians of
    EXECUTABLE_ROUNDS rounds in which the two take turns."""
    path = os.path.join(args.dir, file_name(args.model, args.exporter, 1))
    program = build_program(path)
    inputs = load_inputs(args.dir, args.model, 1, program)
    built = os.path.join(args.build_dir, 'model')
    if os.path.exists(built):
        build = inference.NativeBuild(args.build_dir, executable=built)
    else:
        build = inference.build_executable(program, args.build_dir, 900, make_variables=())
        if build.executable is None:
            return {'failure': build.failure}
    executable = inference.ExecutableRuns(build, program, list(inputs.values()), 900)
    native = native_call(Executor(program, backend='native'), inputs)
    estimate_s = statistics.mean(timed_calls(native, 3))  # and the warm-up
    per_round = math.ceil(repetitions(args.budget, estimate_s) / EXECUTABLE_ROUNDS)
    executable_ms, native_ms, best_ms = [], [], math.inf
    for round_ in range(EXECUTABLE_ROUNDS):
        for turn in ('executable', 'native')[::1 if round_ % 2 == 0 else -1]:
            if turn == 'executable':
                timing = executable.run(per_round)
                executable_ms.append(timing.median_ms)
                best_ms = min(best_ms, timing.best_ms)
            else:
                native_ms.append(1e3 * statistics.median(timed_calls(native, per_round)))
    return {'executable_ms': statistics.median(executable_ms), 'executable_best_ms': best_ms,
            'native_ms': statistics.median(native_ms), 'compile_s': build.compile_s}


def profile_worker(args):
    """Per-instruction means of the native profiling build and per-operator
    totals of both backends over ``args.runs`` runs after a warm-up."""
    path = os.path.join(args.dir, file_name(args.model, args.exporter, args.batch))
    program = build_program(path)
    inputs = load_inputs(args.dir, args.model, args.batch, program)
    tracer = Tracer(max_events=None)
    executor = Executor(program, backend='native', tracer=tracer)
    executor.run(inputs)
    tracer.events.clear()  # the warm-up's
    for _ in range(args.runs):
        executor.run(inputs)
    per_instruction = collections.defaultdict(list)
    native_ops = collections.Counter()
    for event in tracer.events:
        per_instruction[(event['name'], json.dumps(event.get('args', {}), sort_keys=True))] \
            .append(event['dur'] / 1e3)
        native_ops[event['name']] += event['dur'] / 1e3 / args.runs
    layers = sorted(((statistics.mean(d), name, json.loads(a))
                     for (name, a), d in per_instruction.items()), key=lambda t: -t[0])
    with tempfile.TemporaryDirectory() as directory:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(directory, 'ort')
        session = onnxruntime.InferenceSession(path, options,
                                               providers=['CPUExecutionProvider'])
        call = ort_call(session, inputs)
        for _ in range(args.runs + 1):
            call()
        with open(session.end_profiling()) as f:
            events = json.load(f)
    ort_ops = collections.Counter()
    for event in events:
        if event.get('cat') == 'Node' and event['name'].endswith('_kernel_time'):
            ort_ops[event['args']['op_name']] += event['dur'] / 1e3 / (args.runs + 1)
    return {'layers': layers[:12], 'native_ops': dict(native_ops), 'ort_ops': dict(ort_ops)}


WORKERS = {'accept': accept_worker, 'time': time_worker, 'executable': executable_worker,
           'profile': profile_worker}


# -- in the parent -----------------------------------------------------------

def run_worker(kind, args, model, exporter, threads=1, batch=1, timeout_s=1800, extra=()):
    """One worker in a child process started with the thread settings;
    its JSON, or {'failure': why}."""
    env = dict(os.environ)
    for variable in THREAD_VARIABLES:
        env.pop(variable, None)
        if threads is not None:
            env[variable] = str(threads)
    if threads is not None:
        env['OPENBLAS_NUM_THREADS'] = str(threads)  # the VM's products
    argv = [sys.executable, os.path.abspath(__file__), '--worker', kind, '--dir', args.dir,
            '--model', model, '--exporter', exporter, '--batch', str(batch),
            '--threads', str(threads or 0), '--budget', str(args.budget)] + list(extra)
    if args.refusals_only:
        argv.append('--refusals-only')
    # Its own process group: stopping it stops its busy neighbour too.
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as worker:
        try:
            stdout, stderr = worker.communicate(timeout=timeout_s)
        except BaseException as e:  # the time limit, or the user's Ctrl-C
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
            if not isinstance(e, subprocess.TimeoutExpired):
                raise
            return {'failure': '%s worker ran over %d s' % (kind, timeout_s)}
    if worker.returncode != 0:
        lines = stderr.strip().splitlines() or ['exit status %d' % worker.returncode]
        return {'failure': lines[-1][:300]}
    return json.loads(stdout.strip().splitlines()[-1])


def exported(args):
    """The manifest of --dir: {file name: entry}."""
    path = os.path.join(args.dir, 'manifest.json')
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def export_stage(args):
    if not os.path.exists(args.torch_python):
        print('export: %s missing (make bench-torch-env); using the files in %s'
              % (args.torch_python, args.dir), file=sys.stderr)
        return
    export = ['nice', '-n', '10', args.torch_python, os.path.join(HERE, 'foreign_export.py'),
              args.dir, '--models']
    subprocess.run(export + args.models + ['--batches', '1'], check=False)
    large = [b for b in args.batches if b > 1]
    models = [m for m in args.models if m in LARGE_BATCH]
    if large and models:
        subprocess.run(export + models + ['--batches'] + [str(b) for b in large], check=False)


def _ok(manifest, name, exporter, batch):
    return manifest.get(file_name(name, exporter, batch), {}).get('status') == 'ok'


def accept_stage(args, manifest):
    rows = []
    for name in args.models:
        for exporter in EXPORTERS:
            entry = manifest.get(file_name(name, exporter, 1))
            if entry is None:
                continue
            row = {'model': name, 'exporter': exporter, 'what': entry['what'],
                   'library': entry['library']}
            if entry['status'] != 'ok':
                row['export_failure'] = entry['status']
            else:
                print('accept: %s %s ...' % (name, exporter), file=sys.stderr, flush=True)
                row.update(run_worker('accept', args, name, exporter, threads=None))
            rows.append(row)
    return rows


def time_stage(args, manifest, accepted):
    """``accepted``: the accept stage's rows, if it ran: files it found
    refused are not timed."""
    refused = {(r['model'], r['exporter']) for r in accepted if r.get('refused')}
    rows = []
    for name in args.models:
        # A model whose chosen export failed (GPT-2's TorchScript one) is
        # timed on the other.
        exporters = [e for e in args.time_exporters if _ok(manifest, name, e, 1)] or \
            [e for e in EXPORTERS if _ok(manifest, name, e, 1)][:1]
        for exporter in exporters:
            for batch in args.batches:
                if not _ok(manifest, name, exporter, batch) or (name, exporter) in refused \
                        or (batch > 1 and name not in LARGE_BATCH):
                    continue
                row = {'model': name, 'exporter': exporter, 'batch': batch, 'ms': {}}
                for threads in THREADS:
                    print('time: %s %s batch %d, threads %s ...' % (
                        name, exporter, batch, threads or 'default'), file=sys.stderr, flush=True)
                    result = run_worker('time', args, name, exporter, threads, batch)
                    key = 'threads_%s' % (threads or 'default')
                    if 'failure' in result:
                        row.setdefault('failures', {})[key] = result['failure']
                    else:
                        row['ms'].update({'%s_%s' % (k, key): v
                                          for k, v in result['ms'].items()})
                rows.append(row)
    return rows


def executable_stage(args, manifest):
    rows = []
    for name in args.executables:
        if not _ok(manifest, name, 'torchscript', 1):
            continue
        with tempfile.TemporaryDirectory() as directory:  # built once for both settings
            for threads in THREADS:
                print('executable: %s, threads %s ...' % (name, threads or 'default'),
                      file=sys.stderr, flush=True)
                rows.append(dict(run_worker('executable', args, name, 'torchscript', threads,
                                            extra=['--build-dir', directory]),
                                 model=name, threads=threads or 'default'))
    return rows


def ratio(row, impl, setting):
    ms = row['ms']
    a, b = ms.get('%s_%s' % (impl, setting)), ms.get('onnxruntime_%s' % setting)
    return None if a is None or b is None else a / b


def profile_stage(args, manifest, timings):
    """The three worst one-thread ratios of each batch size timed; without
    the time stage, every model of --models at each of --batches."""
    if timings:
        chosen = []
        for batch in sorted({r['batch'] for r in timings}):
            chosen += sorted((r for r in timings if r['batch'] == batch and
                              ratio(r, 'native', 'quiet_threads_1') is not None),
                             key=lambda r: -ratio(r, 'native', 'quiet_threads_1'))[:3]
    else:
        chosen = [{'model': name, 'exporter': exporter, 'batch': batch}
                  for name in args.models for batch in args.batches
                  for exporter in [e for e in args.time_exporters
                                   if _ok(manifest, name, e, batch)][:1]]
    rows = []
    for row in chosen:
        print('profile: %s batch %d ...' % (row['model'], row['batch']), file=sys.stderr,
              flush=True)
        rows.append(dict(run_worker('profile', args, row['model'], row['exporter'],
                                    batch=row['batch'], extra=['--runs', '20']),
                         model=row['model'], exporter=row['exporter'], batch=row['batch'],
                         ratio=ratio(row, 'native', 'quiet_threads_1') if 'ms' in row else None))
    return rows


# -- the report ----------------------------------------------------------------

def _fmt(value, pattern='%.2fx'):
    return 'n/a' if value is None else pattern % value


def _agrees(row, key):
    if key + '_failure' in row:
        return 'fails: ' + row[key + '_failure'][:80]
    if key + '_error' not in row:
        return ''
    error = row[key + '_error']
    return ('yes' if error <= RELATIVE_TOLERANCE else 'NO') + ' (%.0e)' % error


def refused_ops(row):
    """{operator: [reasons]} of an accept row."""
    ops = collections.OrderedDict()
    for op, reason in row.get('refused', []):
        ops.setdefault(op, [])
        if reason not in ops[op]:
            ops[op].append(reason)
    return ops


def acceptance_markdown(rows):
    exported_rows = [r for r in rows if 'instructions' in r]
    accepted = [r for r in exported_rows if not r['refused']]
    vm_ok = [r for r in exported_rows if r.get('vm_error', 1) <= RELATIVE_TOLERANCE]
    native_run = [r for r in accepted if 'native_error' in r or 'native_failure' in r]
    native_ok = [r for r in native_run if r.get('native_error', 1) <= RELATIVE_TOLERANCE]
    lines = ['## Acceptance (batch 1)', '',
             '%d files (%d models x 2 exporters); %d exported, %d compiled. The VM matches '
             "onnxruntime on %d; native accepts %d, and of the %d it ran, %d match onnxruntime."
             % (len(rows), len({r['model'] for r in rows}),
                len([r for r in rows if 'export_failure' not in r]), len(exported_rows),
                len(vm_ok), len(accepted), len(native_run), len(native_ok)), '',
             '| model | exporter | instructions | VM = onnxruntime | native refuses | '
             'native = onnxruntime |', '|---|---|---|---|---|---|']
    for r in rows:
        if 'export_failure' in r:
            refused = 'export failed: ' + r['export_failure'][:120]
        elif 'compile_error' in r or 'failure' in r:
            refused = 'compile failed: ' + r.get('compile_error', r.get('failure', ''))[:120]
        else:
            refused = ', '.join('%s (%d)' % (op, sum(1 for o, _ in r['refused'] if o == op))
                                for op in refused_ops(r)) or 'nothing'
        lines.append('| %s | %s | %s | %s | %s | %s |' % (
            r['what'], r['exporter'], r.get('instructions', ''), _agrees(r, 'vm'),
            refused.replace('|', '/'), _agrees(r, 'native')))
    return lines


SETTINGS = (('b1 1T', 'quiet_threads_1'), ('b1 default', 'quiet_threads_default'),
            ('busy 1T', 'busy_threads_1'), ('busy default', 'busy_threads_default'),
            ('busy default, means', 'busymean_threads_default'))


def _median(values):
    values = [v for v in values if v is not None]
    return (statistics.median(values), max(values)) if values else (None, None)


def timing_markdown(rows):
    lines = ['## Native against onnxruntime', '',
             'Ratios of median times (native / onnxruntime; below 1 is faster), both in one '
             'process per thread setting; "busy": one other process spinning on a core; '
             '"default busy, means": the ratio of mean times there. '
             '"2T/1T busy": native with default threads over native with one, both busy, '
             'timed call by call in one process (above 1: the second thread costs). VM: the '
             'NumPy VM, one thread, quiet.', '',
             '| model | exporter | batch | native ms (1T) | onnxruntime ms (1T) | 1T | default | '
             '1T busy | default busy | default busy, means | 2T/1T busy | VM (1T) |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        ms = r['ms']
        cells = [_fmt(ratio(r, 'native', s)) for _, s in SETTINGS]
        busy1, busy2 = ms.get('native_busy_threads_1'), ms.get('native_busy_threads_default')
        if 'native_2t_over_1t_busy_threads_default' in ms:  # interleaved (time_worker)
            busy1, busy2 = 1.0, ms['native_2t_over_1t_busy_threads_default']
        lines.append('| %s | %s | %d | %s | %s | %s | %s | %s |' % (
            r['model'], r['exporter'], r['batch'],
            _fmt(ms.get('native_quiet_threads_1'), '%.2f'),
            _fmt(ms.get('onnxruntime_quiet_threads_1'), '%.2f'), ' | '.join(cells),
            _fmt(busy2 / busy1 if busy1 and busy2 else None),
            _fmt(ratio(r, 'vm', 'quiet_threads_1'))) +
            (' failed: %s' % '; '.join('%s %s' % kv for kv in r['failures'].items())
             if r.get('failures') else ''))
    lines += ['', '| summary | median | worst |', '|---|---|---|']
    for batch in sorted({r['batch'] for r in rows}):
        for label, setting in SETTINGS:
            median, worst = _median([ratio(r, 'native', setting) for r in rows
                                     if r['batch'] == batch])
            lines.append('| batch %d, %s | %s | %s |' % (batch, label.replace('b1 ', ''),
                                                          _fmt(median), _fmt(worst)))
    median, worst = _median([ratio(r, 'vm', 'quiet_threads_1') for r in rows])
    if median is not None:
        lines.append('| VM, batch 1, 1T | %s | %s |' % (_fmt(median), _fmt(worst)))
    return lines


def executable_markdown(rows):
    lines = ['## The emitted executable, default Makefile', '',
             '`emit_c` then `make -C DIR` (no variables); its `--iterations` median against '
             "the in-Python native backend's, batch 1, medians of %d rounds in which the two "
             'take turns.' % EXECUTABLE_ROUNDS, '',
             '| model | threads | executable ms (median, best) | in-Python native ms | ratio |',
             '|---|---|---|---|---|']
    for r in rows:
        if 'failure' in r:
            lines.append('| %s | %s | failed: %s | | |' % (r['model'], r['threads'],
                                                          r['failure'][:120]))
            continue
        lines.append('| %s | %s | %.2f, %.2f | %.2f | %.2fx |' % (
            r['model'], r['threads'], r['executable_ms'], r['executable_best_ms'],
            r['native_ms'], r['executable_ms'] / r['native_ms']))
    return lines


def profile_markdown(rows):
    lines = ['## Profiles, one thread (the worst three of each batch timed, or those asked for)']
    for r in rows:
        lines += ['', '### %s (%s export, batch %d), %s onnxruntime\'s time' % (
            r['model'], r['exporter'], r.get('batch', 1), _fmt(r['ratio']))]
        if 'failure' in r:
            lines.append('profile failed: %s' % r['failure'])
            continue
        lines += ['', '| operator | native ms/run | onnxruntime ms/run |', '|---|---|---|']
        ops = sorted(set(r['native_ops']) | set(r['ort_ops']),
                     key=lambda op: -max(r['native_ops'].get(op, 0), r['ort_ops'].get(op, 0)))
        for op in ops[:12]:
            lines.append('| %s | %s | %s |' % (op, _fmt(r['native_ops'].get(op), '%.3f'),
                                               _fmt(r['ort_ops'].get(op), '%.3f')))
        lines += ['', 'Slowest native instructions:', '', '| ms/run | instruction | values |',
                  '|---|---|---|']
        for ms, name, info in r['layers'][:8]:
            lines.append('| %.3f | %s | %s |' % (ms, name, ', '.join(
                '%s' % v for v in info.values()).replace('|', '/')[:150]))
    return lines


def refusals_text(rows):
    """Per file, every operator the native backend refuses and why."""
    lines = []
    for r in rows:
        ops = refused_ops(r)
        lines.append('%s.%s: %s' % (r['model'], r['exporter'], 'accepted' if 'refused' in r
                                    and not ops else '' if ops else
                                    'not compiled: ' + r.get('export_failure', r.get(
                                        'compile_error', r.get('failure', '?')))))
        for op, reasons in ops.items():
            lines.append('    %s: %s' % (op, '; '.join(reasons)))
    return '\n'.join(lines) + '\n'


def markdown(results):
    lines = ['# Foreign models: native against onnxruntime', '',
             'Run %s on %d cores; %s.' % (results['when'], os.cpu_count(), results['versions'])]
    for part, render in (('accept', acceptance_markdown), ('time', timing_markdown),
                         ('executable', executable_markdown), ('profile', profile_markdown)):
        if results.get(part):
            lines += [''] + render(results[part])
    return '\n'.join(lines) + '\n'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='%s only, batch 1, short budget' % ', '.join(QUICK))
    parser.add_argument('--models', nargs='+', choices=MODELS, default=list(MODELS))
    parser.add_argument('--stages', nargs='+', default=list(WORKERS) + ['export'],
                        choices=['export'] + list(WORKERS))
    parser.add_argument('--batches', nargs='+', type=int, default=[1, 32])
    parser.add_argument('--time-exporters', nargs='+', choices=EXPORTERS,
                        default=['torchscript'])
    parser.add_argument('--executables', nargs='*', default=list(EXECUTABLES))
    parser.add_argument('--budget', type=float, default=1.0,
                        help='seconds of timed calls per candidate and setting')
    parser.add_argument('--torch-python', default='.venv-torch/bin/python')
    parser.add_argument('--dir', default='result/foreign', help='the exported files')
    parser.add_argument('--out', default='benchmarks/out')
    parser.add_argument('--refusals', help='also write the refused operators per file here')
    parser.add_argument('--refusals-only', action='store_true',
                        help='accept: do not build and run the native library (no C compiler '
                             'runs: quick)')
    # A child process of this script: one worker, JSON on stdout.
    parser.add_argument('--worker', choices=list(WORKERS), help=argparse.SUPPRESS)
    for hidden in ('--model', '--exporter'):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument('--batch', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--threads', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--runs', type=int, default=20, help=argparse.SUPPRESS)
    parser.add_argument('--build-dir', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)))
        return
    if args.quick:
        args.models = [m for m in args.models if m in QUICK]
        args.batches, args.budget = [1], min(args.budget, 0.3)
        args.executables = [m for m in args.executables if m in QUICK]
    results = {'when': time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()),
               'versions': 'onnxruntime %s, numpy %s' % (onnxruntime.__version__,
                                                       numpy.__version__)}
    if 'export' in args.stages:
        export_stage(args)
    manifest = exported(args)
    stages = {'accept': lambda: accept_stage(args, manifest),
              'time': lambda: time_stage(args, manifest, results.get('accept', [])),
              'executable': lambda: executable_stage(args, manifest),
              'profile': lambda: profile_stage(args, manifest, results.get('time', []))}
    os.makedirs(args.out, exist_ok=True)
    for stage, run in stages.items():
        if stage in args.stages:
            results[stage] = run()
            write_results(args, results)  # after each stage: a long run keeps what it did
    print(markdown(results))


def write_results(args, results):
    with open(os.path.join(args.out, 'foreign_models.md'), 'w') as f:
        f.write(markdown(results))
    with open(os.path.join(args.out, 'foreign_models.json'), 'w') as f:
        json.dump(results, f, indent=1)
    if args.refusals and results.get('accept'):
        os.makedirs(os.path.dirname(os.path.abspath(args.refusals)), exist_ok=True)
        with open(args.refusals, 'w') as f:
            f.write(refusals_text(results['accept']))


if __name__ == '__main__':
    main()
