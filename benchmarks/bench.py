"""The benchmark suite: per-iteration time of a training step in plain
Chainer, Chainer + compile_onnx, the fully compiled training step,
hand-written NumPy (the floor) and PyTorch eager; and inference on the
VM against onnxruntime on the same exported file.

    python benchmarks/bench.py [--optimizer sgd|momentum|adam] [--quick]
                               [--torch-python .venv-torch/bin/python] [--out result/bench]

Every training figure is also given as a ratio to hand-written NumPy measured
in the same run.  Writes benchmark.md, benchmark.json and benchmark.png to
``--out`` and prints the markdown.
"""
import argparse
import json
import os
import sys
import tempfile

import chainer
import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inference_candidates as inference  # noqa: E402
import models  # noqa: E402
import report  # noqa: E402
import training_candidates as training  # noqa: E402
from numpy_reference import numpy_step  # noqa: E402
from timing import time_interleaved  # noqa: E402

import chainer_compiler  # noqa: E402

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

def _data(shape, batch, seed=0):
    rng = numpy.random.RandomState(seed)
    x = rng.uniform(-1, 1, (batch,) + shape).astype(numpy.float32)
    t = rng.randint(0, 10, batch).astype(numpy.int32)
    return x, t


def _slug(name):
    return ''.join(c if c.isalnum() else '_' for c in name)


def _initialized(constructor, x):
    numpy.random.seed(0)
    model = constructor()
    with chainer.using_config('train', False):
        model(x)
    return model


def bench_training(name, constructor, spec, shape, batch, args):
    x, t = _data(shape, batch)
    model = _initialized(constructor, x)
    onnx_file = os.path.join(args.work, 'train_%s.onnx' % _slug(name))
    chainer_compiler.export(model, [x], onnx_file)
    steps = {
        'numpy': numpy_step(model, x, t, args.optimizer),
        'chainer': training.chainer_step(model, x, t, args.optimizer),
        'compile_onnx': training.compile_onnx_step(model, x, t, args.optimizer, onnx_file),
        'compiled_step': training.compiled_training_step(model, x, t, args.optimizer),
    }
    losses = {impl: training.first_loss(step) for impl, step in steps.items()}
    times = time_interleaved(steps, budget_s=args.budget)
    row = {'model': name, 'batch': batch, 'ms': times, 'first_loss': losses, 'notes': {}}
    try:
        torch_spec = dict(spec, optimizer=args.optimizer, warmup=5,
                          repeats=max(5, min(300, int(args.budget * 1e3 / times['numpy']))))
        ms, loss, versions = training.torch_time(args.torch_python, torch_spec, model, x, t)
        row['ms']['pytorch'], row['first_loss']['pytorch'] = ms, loss
        row['notes']['pytorch'] = versions
    except (RuntimeError, OSError, ValueError) as e:
        row['notes']['pytorch'] = str(e)
    return row


def bench_inference(name, constructor, shape, batch, args):
    x, _ = _data(shape, batch, seed=1)
    model = _initialized(constructor, x)
    onnx_file = os.path.join(args.work, 'infer_%s_%d.onnx' % (_slug(name), batch))
    chainer_compiler.export(model, [x], onnx_file)
    vm = inference.vm_inference(onnx_file, x)
    ort = inference.onnxruntime_inference(onnx_file, x)
    agree = inference.same_outputs(vm, ort)
    # Not interleaved: onnxruntime's worker threads spin-wait after each run
    # and would starve NumPy's BLAS threads in the VM's next call.
    times = {}
    for impl, fn in (('vm', vm), ('onnxruntime', ort)):
        times.update(time_interleaved({impl: fn}, budget_s=args.budget / 2))
    return {'model': name, 'batch': batch, 'ms': times, 'outputs_agree': agree}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--optimizer', default='sgd', choices=sorted(training.OPTIMIZERS))
    parser.add_argument('--torch-python', default='.venv-torch/bin/python',
                        help='python of a virtualenv with torch (optional)')
    parser.add_argument('--out', default='result/bench')
    parser.add_argument('--budget', type=float, default=2.0,
                        help='seconds of timed calls per implementation and model')
    parser.add_argument('--quick', action='store_true',
                        help='small models only, short budget (a smoke run)')
    args = parser.parse_args(argv)
    selected = MODELS
    if args.quick:
        selected = [m for m in MODELS if m[4] <= 8 and m[2]['model'] == 'MLP']
        args.budget = min(args.budget, 0.3)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        args.work = work
        training_rows = []
        for name, constructor, spec, shape, batch in selected:
            print('training: %s, batch %d ...' % (name, batch), file=sys.stderr)
            training_rows.append(bench_training(name, constructor, spec, shape, batch, args))
        inference_rows = []
        for name, constructor, _, shape, _ in selected:
            for batch in (1, 32):
                print('inference: %s, batch %d ...' % (name, batch), file=sys.stderr)
                inference_rows.append(bench_inference(name, constructor, shape, batch, args))
    results = {'optimizer': args.optimizer, 'training': training_rows,
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
