"""The benchmark suite: per-iteration time of a training step in plain
Chainer, Chainer + compile_onnx, the fully compiled training step,
hand-written NumPy (the floor) and PyTorch eager; and inference on the
VM, the native backend (in Python, and its emitted C as a program of its
own) against onnxruntime on the same exported file.

    python benchmarks/bench.py [--optimizer sgd|momentum|adam] [--accuracy] [--quick]
                               [--models NAME ...] [--inference-only | --training-only]
                               [--torch-python .venv-torch/bin/python] [--out result/bench]

Every training figure is also given as a ratio to hand-written NumPy measured
in the same run, every inference figure as a ratio to onnxruntime.  Writes
benchmark.md, benchmark.json and benchmark.png to ``--out`` and prints the
markdown.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import chainer
import chainer.links as L
import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inference_candidates as inference  # noqa: E402
import models  # noqa: E402
import report  # noqa: E402
import training_candidates as training  # noqa: E402
from numpy_reference import numpy_step  # noqa: E402
from timing import busy_neighbour, time_interleaved  # noqa: E402

import chainer_compiler  # noqa: E402
from chainer_compiler.pipeline import build_program  # noqa: E402
from chainer_compiler.runtime.errors import RuntimeVMError  # noqa: E402

#: (name, constructor, spec for torch_reference.py, input shape, batch size)
MODELS = [
    ('MLP 784-1000-1000-10', lambda: models.MLP([784, 1000, 1000, 10]),
     {'model': 'MLP', 'sizes': [784, 1000, 1000, 10]}, (784,), 100),
    ('MLP 784-100-100-10', lambda: models.MLP([784, 100, 100, 10]),
     {'model': 'MLP', 'sizes': [784, 100, 100, 10]}, (784,), 8),
    ('MLP 10 layers, width 32', lambda: models.MLP([784] + [32] * 9 + [10]),
     {'model': 'MLP', 'sizes': [784] + [32] * 9 + [10]}, (784,), 8),
    ('LeNet-5', models.LeNet5, {'model': 'LeNet5'}, (1, 28, 28), 32),
    ('ResNet-18-style CNN', lambda: models.ResNet18Style(64),
     {'model': 'ResNet18Style', 'width': 64}, (3, 32, 32), 8),
]
#: (name, constructor, input shape, batch sizes) of the inference benchmark.
INFERENCE_MODELS = [(name, constructor, shape, (1, 32))
                    for name, constructor, _, shape, _ in MODELS] + [
    ('ResNet-50', lambda: L.ResNet50Layers(pretrained_model=None), (3, 224, 224), (1,)),
]
#: The training candidates timed again beside one competing busy process
#: (issue 31's training targets hold on a shared CPU too), as '<impl>_busy'.
BUSY_IMPLS = ('chainer', 'compiled_step_native', 'pytorch')

def batch_data(shape, batch, seed=0):
    rng = numpy.random.RandomState(seed)
    x = rng.uniform(-1, 1, (batch,) + shape).astype(numpy.float32)
    t = rng.randint(0, 10, batch).astype(numpy.int32)
    return x, t


def _slug(name):
    return ''.join(c if c.isalnum() else '_' for c in name)


def initialized_model(constructor, x):
    numpy.random.seed(0)
    model = constructor()
    with chainer.using_config('train', False):
        model(x)
    return model


def bench_training(name, constructor, spec, shape, batch, args):
    x, t = batch_data(shape, batch)
    model = initialized_model(constructor, x)
    onnx_file = os.path.join(args.work, 'train_%s.onnx' % _slug(name))
    chainer_compiler.export(model, [x], onnx_file)
    run = dict(optimizer=args.optimizer, accuracy=args.accuracy)
    steps = {
        'numpy': numpy_step(model, x, t, **run),
        'chainer': training.chainer_step(model, x, t, **run),
        'compile_onnx': training.compile_onnx_step(model, x, t, onnx_file=onnx_file, **run),
        'compiled_step': training.compiled_training_step(model, x, t, **run),
    }
    notes = {}
    native = {
        'compile_onnx_native': lambda: training.compile_onnx_step(
            model, x, t, onnx_file=onnx_file, backend='native', **run),
        'compile_onnx_native_packed': lambda: training.compile_onnx_step(
            model, x, t, onnx_file=onnx_file, backend='native', pack_parameters=True, **run),
        'compiled_step_native': lambda: training.compiled_training_step(
            model, x, t, backend='native', **run),
    }
    for impl, build in native.items():
        try:
            steps[impl] = build()
        except RuntimeVMError as e:  # an op without a C kernel, or no C compiler
            notes[impl] = '%s: %s' % (type(e).__name__, str(e).splitlines()[0])
    losses = {impl: training.first_loss(step) for impl, step in steps.items()}
    # PyTorch is interleaved with the others too, from its own process: a
    # burst of load on this shared machine then hits it alike.
    torch_step = None
    try:
        torch_step = training.TorchStep(args.torch_python, dict(spec, **run), model, x, t)
        steps['pytorch'], losses['pytorch'] = torch_step, torch_step.first_loss
        notes['pytorch'] = torch_step.versions
    except (RuntimeError, OSError, ValueError) as e:
        notes['pytorch'] = str(e)
    try:
        times = time_interleaved(steps, budget_s=args.budget)
        with busy_neighbour():
            busy = time_interleaved({i: steps[i] for i in BUSY_IMPLS if i in steps},
                                    budget_s=args.budget)
        times.update({'%s_busy' % impl: ms for impl, ms in busy.items()})
    finally:
        if torch_step is not None:
            torch_step.close()
    return {'model': name, 'batch': batch, 'ms': times, 'first_loss': losses, 'notes': notes}


def _native_candidates(program, x, directory, args):
    """The native backend in Python and its emitted C built and timed as an
    executable: (the in-Python callable or None, {'executable': ms},
    {'executable': first output}, the row's build, notes and
    executable_best_ms fields).  A notes entry says why a column is n/a."""
    build = inference.build_executable(program, directory, args.compile_timeout)
    notes, ms, outputs = {}, {}, {}
    native = None
    if build.emit_s is None or build.timed_out:
        # Executor(backend='native') would emit and compile the same C again.
        notes['native'] = 'not attempted: %s' % build.failure
    else:
        try:
            native = inference.native_inference(program, x)
        except RuntimeVMError as e:
            notes['native'] = '%s: %s' % (type(e).__name__, str(e).splitlines()[0])
    fields = {'build': {'emit_s': build.emit_s, 'compile_s': build.compile_s,
                        'arena_bytes': build.arena_bytes}, 'notes': notes}
    if build.executable is None:
        notes['executable'] = build.failure
    else:
        try:
            timing, outputs['executable'] = inference.executable_timing(
                build, program, [x], args.budget / 2, args.compile_timeout)
            # The median, as every other column (a stall on this shared
            # machine moves a mean); the best beside it.
            ms['executable'], fields['executable_best_ms'] = timing.median_ms, timing.best_ms
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            notes['executable'] = 'run failed: %s' % e
    return native, ms, outputs, fields


def bench_inference(name, constructor, shape, batch, args):
    x, _ = batch_data(shape, batch, seed=1)
    model = initialized_model(constructor, x)
    slug = '%s_%d' % (_slug(name), batch)
    onnx_file = os.path.join(args.work, 'infer_%s.onnx' % slug)
    chainer_compiler.export(model, [x], onnx_file)
    program = build_program(onnx_file)
    native, times, outputs, row = _native_candidates(
        program, x, os.path.join(args.work, 'c_%s' % slug), args)
    candidates = {'vm': inference.vm_inference(program, x)}
    if native is not None:
        candidates['native'] = native
    candidates['onnxruntime'] = inference.onnxruntime_inference(onnx_file, x)
    outputs.update({impl: inference.first_output(fn) for impl, fn in candidates.items()})
    reference = outputs.pop('onnxruntime')
    # Not interleaved, and onnxruntime last: its worker threads spin-wait
    # after each run and would starve NumPy's BLAS threads and the native
    # kernels' OpenMP threads in their next call.
    for impl, fn in candidates.items():
        times.update(time_interleaved({impl: fn}, budget_s=args.budget / 2))
    peak, constants = inference.vm_peak_bytes(program, x)
    row.update({'model': name, 'batch': batch, 'ms': times,
                'outputs_agree': {impl: inference.same_outputs(reference, out)
                                  for impl, out in outputs.items()},
                'memory': {'vm_peak_bytes': peak, 'constant_bytes': constants}})
    return row


def _select(args):
    """The training and inference models this run covers."""
    training_models, inference_models = MODELS, INFERENCE_MODELS
    if args.models:
        wanted = [w.lower() for w in args.models]
        training_models, inference_models = (
            [m for m in table if any(w in m[0].lower() for w in wanted)]
            for table in (MODELS, INFERENCE_MODELS))
    elif args.quick:
        training_models = [m for m in MODELS if m[4] <= 8 and m[2]['model'] == 'MLP']
        names = {m[0] for m in training_models}
        inference_models = [m for m in INFERENCE_MODELS if m[0] in names]
    if args.inference_only:
        training_models = []
    if args.training_only:
        inference_models = []
    return training_models, inference_models


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--optimizer', default='sgd', choices=sorted(training.OPTIMIZERS))
    parser.add_argument('--accuracy', action='store_true',
                        help='every training candidate computes the batch accuracy too, as '
                             "L.Classifier does by default (issue 15's Adam targets)")
    parser.add_argument('--torch-python', default='.venv-torch/bin/python',
                        help='python of a virtualenv with torch (optional)')
    parser.add_argument('--out', default='result/bench')
    parser.add_argument('--budget', type=float, default=2.0,
                        help='seconds of timed calls per implementation and model')
    parser.add_argument('--quick', action='store_true',
                        help='short budget, and small MLPs only unless --models says (a '
                             'smoke run)')
    parser.add_argument('--models', nargs='+', metavar='NAME',
                        help='only the models whose names contain one of these (any case), '
                             'e.g. --models lenet resnet-50')
    group = parser.add_mutually_exclusive_group()
    group.add_argument('--inference-only', action='store_true', help='skip training')
    group.add_argument('--training-only', action='store_true', help='skip inference')
    parser.add_argument('--compile-timeout', type=float, default=600.0,
                        help='seconds after which emitting or compiling the native C is '
                             'stopped and its columns are n/a')
    args = parser.parse_args(argv)
    training_models, inference_models = _select(args)
    if args.quick:
        args.budget = min(args.budget, 0.3)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        args.work = work
        training_rows = []
        for name, constructor, spec, shape, batch in training_models:
            print('training: %s, batch %d ...' % (name, batch), file=sys.stderr)
            training_rows.append(bench_training(name, constructor, spec, shape, batch, args))
        inference_rows = []
        for name, constructor, shape, batches in inference_models:
            for batch in batches:
                print('inference: %s, batch %d ...' % (name, batch), file=sys.stderr)
                inference_rows.append(bench_inference(name, constructor, shape, batch, args))
    results = {'optimizer': args.optimizer, 'accuracy': args.accuracy,
               'training': training_rows,
               'inference': inference_rows}
    text = report.markdown(results)
    print(text)
    with open(os.path.join(args.out, 'benchmark.md'), 'w') as f:
        f.write(text)
    with open(os.path.join(args.out, 'benchmark.json'), 'w') as f:
        json.dump(results, f, indent=1)
    chart = os.path.join(args.out, 'benchmark.png')
    report.chart(results, chart)
    print('wrote %s, benchmark.md and benchmark.json' % chart, file=sys.stderr)


if __name__ == '__main__':
    main()
