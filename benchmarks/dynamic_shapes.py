"""The cost of a new batch size (issue 33).

LeNet-5 is exported once at batch 8 with
``dynamic_axes='batch'`` and compiled with ``compile_onnx``; a batch of
another size compiles its programs on first use (native: one C build, the
kernels' objects already in the build cache).  For each backend and batch
the table gives that first call's extra time (the new signature's cost),
then the steady inference time against a model whose file was exported at
that very batch (the target: within 5%; the two run the same program, so
a difference is the machine's noise).  Then the same for a compiled
training step (Classifier, SGD): the first step of a new batch size traces
the model again and compiles (and builds) its step.

Last, a file PyTorch exports with ``dynamic_axes`` (batch and sequence
symbolic, reshaped through Shape -> Gather -> Concat -> Reshape), made in
the benchmark venv (``make bench-torch-env``; skipped without it), runs in
compile_onnx at several batch and sequence sizes on both backends and, with
``emit-c --max batch=16 --symbolic-dims seq=7``, as an executable taking any
batch up to 16; every result is checked against PyTorch's.  Prints Markdown
tables.

The symbolic native program (``emit-c --max batch=32`` of the batch-8
file, which runs the samples in chunks of 32, 16, 8... samples, a program
emitted for each size) is timed against executables emitted from files
exported at batches 1, 13, 31 and 32 (the target: within 10%), each on one
thread (``--threads 1``), interleaved round by round: wall time as the
executable measures its own runs (the median of their means, and the best
run of all rounds), and CPU time as the difference of the children's CPU
time (getrusage) between a run of N iterations and one of 1, over N - 1.  A
copy of the specialised executable, timed as a third candidate, gives the
ratio that is noise (A/A).  The emit and build seconds and the shared library's size of
the symbolic program and of the one exported at 32 come first.

    CHAINER_COMPILER_THREADS=1 python benchmarks/dynamic_shapes.py [--clocks wall cpu]
                                                                    [--rounds N] [--max-only]

``--clocks``: the clocks of the steady times (timing.py): 'wall' by default,
'cpu' the process's CPU time (one native thread: with more it adds theirs).
``--rounds``: rounds of the executables' timing (7).
``--max-only``: only the executables' table (emit-c --max against specialised).
"""
import argparse
import contextlib
import copy
import io
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import chainer
import numpy
from inference_candidates import parse_iterations
from models import LeNet5
from timing import CLOCKS, repetitions, time_interleaved

from chainer_compiler import compile_onnx, compile_training_step, export
from chainer_compiler.cli import main as cli_main

EXPORT_BATCH = 8
BATCHES = (1, 32)
#: The batches of the emit-c --max table: chunks of one bucket, and ragged.
MAX_BATCHES = (1, 13, 31, 32)
HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PYTHON = os.path.join(HERE, '..', '.venv-torch', 'bin', 'python')
#: (batch, sequence length) of the PyTorch check; emit-c --max fixes the
#: sequence at the middle one and takes batches up to TORCH_MAX_BATCH.
TORCH_SIZES = ((1, 4), (5, 7), (13, 3), (1, 7), (13, 7))
TORCH_SEQ, TORCH_MAX_BATCH = 7, 16
#: Run by TORCH_PYTHON: an attention block over (batch, seq, 8) exported with
#: dynamic batch and sequence, and PyTorch's outputs at TORCH_SIZES.
_TORCH_EXPORT = '''
import sys, numpy, torch
torch.manual_seed(0)
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = torch.nn.Linear(8, 24), torch.nn.Linear(8, 8)
        self.norm, self.out = torch.nn.LayerNorm(8), torch.nn.Linear(8, 3)
    def forward(self, x):
        n, t = x.size(0), x.size(1)
        q, k, v = self.qkv(x).view(n, t, 3, 8).unbind(2)
        a = torch.softmax(q @ k.transpose(1, 2) / 8 ** 0.5, dim=-1)
        return self.out(self.norm(x + self.proj(a @ v)).mean(1))
model = Block().eval()
torch.onnx.export(model, (torch.zeros(2, 5, 8),), sys.argv[1], input_names=['x'],
                  output_names=['y'], opset_version=17, dynamo=False,
                  dynamic_axes={'x': {0: 'batch', 1: 'seq'}, 'y': {0: 'batch'}})
arrays = {}
for n, t in %r:
    x = torch.randn(n, t, 8)
    arrays['x_%%d_%%d' %% (n, t)] = x.numpy()
    arrays['y_%%d_%%d' %% (n, t)] = model(x).detach().numpy()
numpy.savez(sys.argv[2], **arrays)
''' % (TORCH_SIZES,)


def _images(batch):
    return numpy.random.RandomState(batch).uniform(-1, 1, (batch, 1, 28, 28)).astype('f')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--clocks', nargs='+', choices=sorted(CLOCKS), default=['wall'],
                        help="clocks of the steady times: 'wall', 'cpu' (this process's)")
    parser.add_argument('--rounds', type=int, default=7,
                        help="rounds of the executables' timing, the median taken")
    parser.add_argument('--max-only', action='store_true',
                        help='only the emit-c --max executables against specialised ones')
    args = parser.parse_args(argv)
    model = LeNet5()
    with chainer.using_config('train', False):
        model(_images(EXPORT_BATCH))
    if args.max_only:
        with tempfile.TemporaryDirectory() as folder, chainer.using_config('train', False):
            dynamic = export(model, [_images(EXPORT_BATCH)], os.path.join(folder, 'dynamic.onnx'),
                             dynamic_axes='batch')
            _symbolic_executables(model, dynamic, folder, args.rounds)
        return 0
    print('| backend | batch | new signature: first call (s) | clock | steady (ms) | exported '
          'at that batch (ms) | ratio |')
    print('|---|---|---|---|---|---|---|')
    with tempfile.TemporaryDirectory() as folder, \
            chainer.using_config('train', False), chainer.using_config('enable_backprop', False):
        os.environ['CHAINER_COMPILER_CACHE'] = os.path.join(folder, 'cache')  # a cold cache
        dynamic = export(model, [_images(EXPORT_BATCH)], os.path.join(folder, 'dynamic.onnx'),
                         dynamic_axes='batch')
        for backend in ('numpy', 'native'):
            kwargs = {'runtime_kwargs': {'backend': backend}}
            compiled = compile_onnx(copy.deepcopy(model), dynamic, **kwargs)
            compiled(_images(EXPORT_BATCH))  # the export's batch: compiled by compile_onnx
            for batch in BATCHES:
                x = _images(batch)
                start = time.perf_counter()
                compiled(x)
                first = time.perf_counter() - start
                fixed_file = export(model, [x], os.path.join(folder, 'at%d.onnx' % batch))
                fixed = compile_onnx(copy.deepcopy(model), fixed_file, **kwargs)
                numpy.testing.assert_allclose(compiled(x).array, fixed(x).array,
                                              rtol=1e-4, atol=1e-5)
                for clock in args.clocks:
                    times = time_interleaved({'dynamic': lambda c=compiled, x=x: c(x),
                                              'fixed': lambda f=fixed, x=x: f(x)},
                                             budget_s=1.0, clock=clock)
                    print('| %s | %d | %.2f | %s | %.3f | %.3f | %.2f |' % (
                        backend, batch, first - times['dynamic'] / 1e3, clock,
                        times['dynamic'], times['fixed'], times['dynamic'] / times['fixed']))
        _symbolic_executables(model, dynamic, folder, args.rounds)
        _training_steps(model)
        _torch_export(folder)
    return 0


def _emit_and_build(onnx_file, out, *options):
    """emit-c ``onnx_file`` into ``out`` and build it with the Makefile's
    defaults; the executable's path.  Prints the seconds of each and the
    shared library's size."""
    said = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        status = cli_main(['emit-c', onnx_file, '-o', out] + list(options))
    assert status == 0, said.getvalue()
    emitted = time.perf_counter()
    subprocess.run(['make', '-s', '-C', out], check=True, capture_output=True)
    print('%s %s: emit %.1f s, build %.1f s, libmodel.so %d KiB' % (
        os.path.basename(out), ' '.join(options), emitted - start,
        time.perf_counter() - emitted, os.path.getsize(os.path.join(out, 'libmodel.so')) >> 10))
    return os.path.join(out, 'model')


def _executable_run(executable, input_file, iterations, folder):
    """(mean and best wall ms per run as the executable measured them,
    children's CPU seconds the whole process took) of one run of
    ``iterations``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([executable, '--threads', '1', '--iterations', str(iterations),
                           '-o', os.path.join(folder, 'out'), input_file],
                          check=True, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    timing = parse_iterations(done.stdout)
    return timing.mean_ms, timing.best_ms, cpu


def _symbolic_executables(model, dynamic, folder, rounds):
    """The symbolic executable (emit-c --max) against specialised ones
    (the module docstring)."""
    print()
    symbolic = _emit_and_build(dynamic, os.path.join(folder, 'c_max'),
                               '--max', 'batch=%d' % max(MAX_BATCHES))
    specialised = {}
    for batch in MAX_BATCHES:
        x = _images(batch)
        fixed_file = export(model, [x], os.path.join(folder, 'c_at%d.onnx' % batch))
        specialised[batch] = _emit_and_build(fixed_file, os.path.join(folder, 'c_at%d' % batch))
    print()
    print('| emit-c, one thread | batch | symbolic --max (ms) | specialised (ms) | ratio | '
          'A/A: a copy of specialised / it |')
    print('|---|---|---|---|---|---|')
    for batch in MAX_BATCHES:
        x = _images(batch)
        # The same program under another name: the ratio that is noise.
        copy = shutil.copy(specialised[batch], specialised[batch] + '_copy')
        executables = {'symbolic': symbolic, 'specialised': specialised[batch], 'copy': copy}
        input_file = os.path.join(folder, 'c_x%d.npy' % batch)
        numpy.save(input_file, x)
        iterations = {name: repetitions(0.3, _executable_run(e, input_file, 3, folder)[0] / 1e3,
                                        min_reps=10, max_reps=100000)
                      for name, e in executables.items()}
        wall, best, cpu = ({name: [] for name in executables} for _ in range(3))
        order = list(executables)
        for round_ in range(rounds):
            for name in (order if round_ % 2 == 0 else order[::-1]):
                ms, best_ms, cpu_n = _executable_run(executables[name], input_file,
                                                     iterations[name], folder)
                cpu_1 = _executable_run(executables[name], input_file, 1, folder)[2]
                wall[name].append(ms)
                best[name].append(best_ms)
                cpu[name].append((cpu_n - cpu_1) / (iterations[name] - 1) * 1e3)
        # wall: the median of the means; best: the best run of all rounds.
        for clock, samples, pick in (('wall', wall, statistics.median), ('best', best, min),
                                     ('cpu', cpu, statistics.median)):
            symbolic_ms, specialised_ms, copy_ms = (
                pick(samples[name]) for name in ('symbolic', 'specialised', 'copy'))
            print('| %s | %d | %.3f | %.3f | %.2f | %.2f |' % (
                clock, batch, symbolic_ms, specialised_ms, symbolic_ms / specialised_ms,
                copy_ms / specialised_ms))


def _torch_export(folder):
    """The PyTorch check (module docstring): raises AssertionError on a
    result that differs from PyTorch's."""
    print()
    if not os.path.exists(TORCH_PYTHON):
        print('PyTorch export with dynamic_axes: skipped, %s is missing (make bench-torch-env)'
              % TORCH_PYTHON)
        return
    path, expected = os.path.join(folder, 'torch.onnx'), os.path.join(folder, 'torch.npz')
    subprocess.run([TORCH_PYTHON, '-W', 'ignore::DeprecationWarning', '-c', _TORCH_EXPORT,
                    path, expected], check=True)
    arrays = numpy.load(expected)
    print('| PyTorch dynamic_axes file | batch | seq | first call (s) | max abs diff |')
    print('|---|---|---|---|---|')
    for backend in ('numpy', 'native'):
        compiled = compile_onnx(chainer.Chain(), path, runtime_kwargs={'backend': backend})
        for n, t in TORCH_SIZES:
            start = time.perf_counter()
            y = compiled(arrays['x_%d_%d' % (n, t)]).array
            first = time.perf_counter() - start
            diff = float(abs(y - arrays['y_%d_%d' % (n, t)]).max())
            print('| compile_onnx, %s | %d | %d | %.2f | %.1e |' % (backend, n, t, first, diff))
            assert diff < 1e-4, (backend, n, t, diff)
    out = os.path.join(folder, 'torch_c')
    start = time.perf_counter()
    _emit_and_build(path, out, '--max', 'batch=%d' % TORCH_MAX_BATCH,
                    '--symbolic-dims', 'seq=%d' % TORCH_SEQ)
    build = time.perf_counter() - start
    for n, t in TORCH_SIZES:
        if t != TORCH_SEQ:
            continue
        numpy.save(os.path.join(folder, 'x.npy'), arrays['x_%d_%d' % (n, t)])
        subprocess.run([os.path.join(out, 'model'), '-o', os.path.join(folder, 'y'),
                        os.path.join(folder, 'x.npy')], check=True)
        diff = float(abs(numpy.load(os.path.join(folder, 'y', 'y.npy'))
                         - arrays['y_%d_%d' % (n, t)]).max())
        print('| emit-c --max batch=%d (emit and build %.1f s) | %d | %d | | %.1e |'
              % (TORCH_MAX_BATCH, build, n, t, diff))
        assert diff < 1e-4, ('emit-c', n, t, diff)


def _training_steps(predictor):
    print()
    print('| backend | batch | training step, new signature: first step (s) | steady (ms) |')
    print('|---|---|---|---|')
    for backend in ('numpy', 'native'):
        classifier = chainer.links.Classifier(copy.deepcopy(predictor))
        optimizer = chainer.optimizers.SGD(lr=0.01)
        optimizer.setup(classifier)
        labels = lambda n: numpy.zeros(n, numpy.int32)  # noqa: E731
        step = compile_training_step(classifier, optimizer,
                                     (_images(EXPORT_BATCH), labels(EXPORT_BATCH)),
                                     runtime_kwargs={'backend': backend})
        for batch in BATCHES:
            x, t = _images(batch), labels(batch)
            start = time.perf_counter()
            step(x, t)
            first = time.perf_counter() - start
            steady = time_interleaved({'step': lambda s=step, x=x, t=t: s(x, t)},
                                      budget_s=1.0)['step']
            print('| %s | %d | %.2f | %.3f |' % (backend, batch, first - steady / 1e3, steady))


if __name__ == '__main__':
    sys.exit(main())
