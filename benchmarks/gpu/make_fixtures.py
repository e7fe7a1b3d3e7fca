"""Programs built with Chainer on this (CPU) machine, saved with their inputs
and NumPy outputs, for run_gpu_checks.py to replay on CuPy where Chainer
cannot be installed.

Each scenario drives a small model through chainer_compiler's Chainer API
(compile_onnx for inference and training forward/backward,
compile_training_step for a whole compiled step) while every
Executor.run_positional call is recorded: the Program, its inputs, its
outputs, and its inputs again after the run (the training step updates
parameters and optimizer state in place).  One recorded call per Program is
written as ``<scenario>.<n>.program`` (save_program) and
``<scenario>.<n>.npz``; ``manifest.json`` lists them.

    .venv/bin/python benchmarks/gpu/make_fixtures.py [--out result/gpu_fixtures]
"""
import argparse
import json
import os
import sys

import numpy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _models():
    import chainer
    import chainer.functions as F
    import chainer.links as L

    class MLP(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.l1 = L.Linear(20, 64)
                self.l2 = L.Linear(64, 64)
                self.l3 = L.Linear(64, 10)

        def forward(self, x):
            return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))

    class CNN(chainer.Chain):
        """Conv + BatchNormalization + pooling + Linear on 3x16x16 images."""

        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.c1 = L.Convolution2D(3, 8, 3, pad=1)
                self.b1 = L.BatchNormalization(8)
                self.c2 = L.Convolution2D(8, 16, 3, pad=1, stride=2)
                self.b2 = L.BatchNormalization(16)
                self.fc = L.Linear(16 * 4 * 4, 10)

        def forward(self, x):
            h = F.relu(self.b1(self.c1(x)))
            h = F.max_pooling_2d(h, 2, 2)
            h = F.relu(self.b2(self.c2(h)))
            return self.fc(h)

    return MLP, CNN


class _Recorder:
    """Records the first ``keep``-th run of every Executor's Program."""

    def __init__(self):
        self.calls = []  # (program, inputs, outputs, inputs after)

    def __enter__(self):
        from chainer_compiler.runtime.executor import Executor
        self._executor = Executor
        self._original = original = Executor.run_positional
        calls = self.calls

        def recording(executor, values, *, consume=False):
            before = [_copy(v) for v in values]
            # The run gets a list of its own: `values` still holds the
            # inputs afterwards, updated in place by a training step.
            outputs = original(executor, list(values))
            calls.append((executor.program, before, [_copy(v) for v in outputs],
                          [_copy(v) for v in values]))
            if consume:
                values.clear()
            return outputs
        Executor.run_positional = recording
        return self

    def __exit__(self, *exc):
        self._executor.run_positional = self._original


def _copy(v):
    if isinstance(v, numpy.ndarray):
        return v.copy()
    if isinstance(v, numpy.generic):
        return v.copy()
    if v is None or isinstance(v, (int, float)):
        return v
    raise TypeError('fixture value of type %s is not supported' % type(v).__name__)


def _scenarios():
    import chainer
    import chainer.links as L

    import chainer_compiler
    MLP, CNN = _models()
    rng = numpy.random.RandomState(0)
    x_mlp = rng.standard_normal((8, 20)).astype(numpy.float32)
    x_cnn = rng.standard_normal((4, 3, 16, 16)).astype(numpy.float32)
    t = rng.randint(0, 10, size=8).astype(numpy.int32)

    def inference(model_class, x):
        def run():
            numpy.random.seed(1)
            model = model_class()
            compiled = chainer_compiler.compile(model, [x])
            with chainer.using_config('train', False), chainer.no_backprop_mode():
                compiled(x)
        return run

    def forward_backward(model_class, x):
        def run():
            numpy.random.seed(2)
            compiled = chainer_compiler.compile(model_class(), [x])
            with chainer.using_config('train', True):
                y = compiled(x)
                chainer.functions.sum(y * y).backward()
        return run

    def step(model_class, x, optimizer):
        def run():
            numpy.random.seed(3)
            model = L.Classifier(model_class())
            opt = optimizer()
            opt.setup(model)
            compiled = chainer_compiler.compile_training_step(model, opt, (x, t[:len(x)]))
            compiled(x, t[:len(x)])
            compiled(x, t[:len(x)])  # the second step: optimizer.t > 1, state non-zero
        return run

    return {
        'mlp_inference': inference(MLP, x_mlp),
        'cnn_inference': inference(CNN, x_cnn),
        'cnn_forward_backward': forward_backward(CNN, x_cnn),
        'mlp_step_adam': step(MLP, x_mlp, chainer.optimizers.Adam),
        'cnn_step_momentum': step(CNN, x_cnn, lambda: chainer.optimizers.MomentumSGD(lr=0.01)),
        'cnn_step_sgd': step(CNN, x_cnn, lambda: chainer.optimizers.SGD(lr=0.01)),
    }


def _arrays(prefix, values, kinds):
    out = {}
    for i, v in enumerate(values):
        if v is None:
            kinds.append('none')
            continue
        kinds.append('scalar' if isinstance(v, numpy.generic) else 'array')
        out['%s%d' % (prefix, i)] = numpy.asarray(v)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', default=os.path.join(ROOT, 'result', 'gpu_fixtures'))
    args = parser.parse_args(argv)
    from chainer_compiler.runtime.serialization import save_program
    os.makedirs(args.out, exist_ok=True)
    manifest = []
    for name, run in _scenarios().items():
        with _Recorder() as recorder:
            run()
        seen = {}
        for program, before, outputs, after in recorder.calls:
            seen[id(program)] = (program, before, outputs, after)  # the last run of each
        for n, (program, before, outputs, after) in enumerate(seen.values()):
            stem = '%s.%d' % (name, n)
            save_program(program, os.path.join(args.out, stem + '.program'))
            input_kinds, output_kinds = [], []
            arrays = _arrays('in', before, input_kinds)
            arrays.update(_arrays('out', outputs, output_kinds))
            arrays.update(_arrays('after', after, []))
            numpy.savez(os.path.join(args.out, stem + '.npz'), **arrays)
            manifest.append({'name': stem, 'program': program.name,
                             'inputs': [v.name for v in program.inputs],
                             'input_kinds': input_kinds, 'output_kinds': output_kinds,
                             'instructions': len(program.instructions)})
            print('%-28s %-16s %4d instructions' % (stem, program.name,
                                                    len(program.instructions)))
    with open(os.path.join(args.out, 'manifest.json'), 'w') as f:
        json.dump(manifest, f, indent=1)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print('%d programs, %.2f MB in %s' % (len(manifest), size / 1e6, args.out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
