"""The training-step implementations compared, each built from a copy of
one initialized Chainer model and returning its loss on the first step.

Run as a script, it times issue 31's two training targets alone, by wall
and by CPU time (timing.py's clocks), quiet and beside one busy process:

    OMP_NUM_THREADS=1 CHAINER_COMPILER_THREADS=1 python benchmarks/training_candidates.py \
        [--targets mlp resnet] [--clocks wall cpu] [--budget S] [--torch-python PY]

'mlp': Chainer against the native compiled step (784-100-100-10, Adam,
accuracy, batch 8; target: Chainer's time / native's >= 10); 'resnet': the
native step against PyTorch eager (ResNet-18-style, SGD, batch 8; target:
native / PyTorch <= 1.0).  Set the thread variables as above for one
thread each: 'cpu' adds up every thread of a process.  Every row times the
same steps (the in-process implementations are rewound to the state after
--pretrain steps before each row: checkpoint).
"""
import argparse
import copy
import json
import os
import select
import subprocess
import sys
import tempfile

import chainer
import chainer.links as L
import numpy

import chainer_compiler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import CLOCKS, busy_neighbour, time_interleaved  # noqa: E402

OPTIMIZERS = {
    'sgd': chainer.optimizers.SGD,
    'momentum': chainer.optimizers.MomentumSGD,
    'adam': chainer.optimizers.Adam,
}


def _classifier(model, accuracy):
    classifier = L.Classifier(model)
    # Every implementation computes the same thing: forward, loss (and
    # accuracy if asked), backward, update.
    classifier.compute_accuracy = accuracy
    return classifier


def optimizer_update_step(predictor, optimizer, accuracy=False):
    """``optimizer.update(classifier, x, t)``, the loop a Chainer user writes;
    ``accuracy``: the classifier computes accuracy too."""
    classifier = _classifier(predictor, accuracy)
    opt = OPTIMIZERS[optimizer]()
    opt.setup(classifier)

    def step(x, t):
        opt.update(classifier, x, t)
        return classifier.loss
    step.classifier, step.optimizer = classifier, opt
    return step


def chainer_step(model, x, t, optimizer, accuracy=False):
    """Plain Chainer."""
    step = optimizer_update_step(copy.deepcopy(model), optimizer, accuracy)
    return _trains(lambda: step(x, t), step.classifier, step.optimizer)


def compile_onnx_step(model, x, t, optimizer, onnx_file, backend='numpy', accuracy=False,
                      pack_parameters=False):
    """The exported model compiled with compile_onnx, its forward and
    backward programs run by ``backend``; loss and optimizer in Chainer
    (``pack_parameters``: the optimizer updates one flat Parameter)."""
    compiled = chainer_compiler.compile_onnx(copy.deepcopy(model), onnx_file,
                                             runtime_kwargs={'backend': backend},
                                             pack_parameters=pack_parameters)
    step = optimizer_update_step(compiled, optimizer, accuracy)
    return lambda: step(x, t)


def compiled_training_step(model, x, t, optimizer, backend='numpy', accuracy=False):
    """Forward, loss, backward and update in one VM program, run by
    ``backend`` ('native': one call into the program compiled to C)."""
    classifier = _classifier(copy.deepcopy(model), accuracy)
    opt = OPTIMIZERS[optimizer]()
    opt.setup(classifier)
    compiled = chainer_compiler.compile_training_step(classifier, opt, (x, t),
                                                      runtime_kwargs={'backend': backend})
    return _trains(lambda: compiled(x, t), classifier, opt)


def _trains(step, model, optimizer):
    """``step``, marked with the model and optimizer it trains (checkpoint)."""
    step.trains = (model, optimizer)
    return step


def _trained_arrays(model):
    """The arrays a step changes in place: parameters, persistent arrays
    (BatchNormalization's averages) and the update rules' states."""
    arrays = [p.array for p in model.params()]
    arrays += [getattr(link, name) for link in model.links() for name in sorted(link._persistent)
               if isinstance(getattr(link, name), numpy.ndarray)]
    arrays += [state[key] for p in model.params() if p.update_rule is not None
               for state in [p.update_rule.state or {}] for key in sorted(state)]
    return arrays


def checkpoint(step):
    """A function putting what ``step`` (chainer_step, compiled_training_step)
    trains back as it is now, in place (a compiled step keeps the arrays).
    Take it after the first step (Chainer makes the optimizer's states then).
    Timing repeats one batch: after about 700 steps of Adam on the MLP, the
    first moments of dead ReLU units decay into subnormal floats, which cost
    every implementation the same absolute time per step (about 0.13 ms
    here), so steps compared must be the same steps."""
    model, optimizer = step.trains
    saved = [a.copy() for a in _trained_arrays(model)]
    rules = [p.update_rule for p in model.params() if p.update_rule is not None]
    counts = [optimizer.t] + [rule.t for rule in rules]

    def restore():
        for array, copy_ in zip(_trained_arrays(model), saved, strict=True):
            numpy.copyto(array, copy_)
        optimizer.t = counts[0]
        for rule, count in zip(rules, counts[1:]):
            rule.t = count
    return restore


def first_loss(step):
    loss = step()
    return float(getattr(loss, 'array', loss))


class TorchStep:
    """PyTorch eager in its own virtualenv: torch_reference.py, started on
    ``model``'s arrays and the batch, serving timed steps.  A candidate that
    times itself (timing.time_interleaved): ``timed_calls(n, clock)`` runs
    ``n`` steps there and returns their seconds ('wall' or 'cpu': that
    process's CPU time).  ``first_loss`` and ``versions``
    come from its first step.  RuntimeError says why it cannot run; close()
    ends the process."""

    def __init__(self, torch_python, spec, model, x, t, timeout_s=900):
        if not torch_python or not os.path.exists(torch_python):
            raise RuntimeError('no PyTorch environment (make bench-torch-env creates '
                               '.venv-torch)')
        arrays = {name: numpy.asarray(p.array) for name, p in model.namedparams()}
        for path, link in model.namedlinks():
            for name in ('avg_mean', 'avg_var'):
                if hasattr(link, name):
                    arrays['%s/%s' % (path.rstrip('/'), name)] = numpy.asarray(getattr(link, name))
        self._timeout_s = timeout_s
        self._work = tempfile.TemporaryDirectory()
        path = os.path.join(self._work.name, 'input.npz')
        numpy.savez(path, spec=json.dumps(spec), x=x, t=t, **arrays)
        script = os.path.join(os.path.dirname(__file__), 'torch_reference.py')
        # stderr to a file: a pipe nobody reads could fill and stall the child.
        self._stderr = open(os.path.join(self._work.name, 'stderr'), 'w+')
        self._process = subprocess.Popen([torch_python, script, path], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        try:
            hello = self._reply()
        except RuntimeError:
            self.close()
            raise
        self.first_loss = hello['first_loss']
        self.versions = 'torch %s, %d threads' % (hello['torch'], hello['threads'])

    def timed_calls(self, n, clock='wall'):
        self._process.stdin.write('%d\n' % n)
        self._process.stdin.flush()
        return self._reply()['seconds' if clock == 'wall' else 'cpu_seconds']

    def _reply(self):
        ready, _, _ = select.select([self._process.stdout], [], [], self._timeout_s)
        line = self._process.stdout.readline() if ready else ''
        if not line:
            self._stderr.seek(0)
            raise RuntimeError('torch_reference.py %s: %s' % (
                'gave no answer in %d s' % self._timeout_s if not ready else 'failed',
                self._stderr.read().strip()[-300:]))
        return json.loads(line)

    def close(self):
        self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._stderr.close()
        self._work.cleanup()


#: --targets: (bench.py's model name, optimizer, accuracy, the two timed
#: implementations, numerator first in the target's ratio).
TARGETS = {
    'mlp': ('MLP 784-100-100-10', 'adam', True, ('chainer', 'native')),
    'resnet': ('ResNet-18-style CNN', 'sgd', False, ('native', 'pytorch')),
}


def _target_rows(target, args):
    """Markdown rows of one target: each clock, quiet and busy."""
    import bench  # its models and helpers; it imports this module
    name, optimizer, accuracy, (first, second) = TARGETS[target]
    _, constructor, spec, shape, batch = next(m for m in bench.MODELS if m[0] == name)
    x, t = bench.batch_data(shape, batch)
    model = bench.initialized_model(constructor, x)
    run = dict(optimizer=optimizer, accuracy=accuracy)
    steps, torch_step = {}, None
    try:
        for impl in (first, second):
            if impl == 'chainer':
                steps[impl] = chainer_step(model, x, t, **run)
            elif impl == 'native':
                steps[impl] = compiled_training_step(model, x, t, backend='native', **run)
            else:
                torch_step = steps[impl] = TorchStep(args.torch_python, dict(spec, **run),
                                                     model, x, t)
        for step in steps.values():
            for _ in range(0 if step is torch_step else max(1, args.pretrain)):
                step()
        # Every row times the same steps from here (checkpoint says why);
        # PyTorch's process is not rewound.
        restores = [checkpoint(step) for step in steps.values() if step is not torch_step]
        rows = []
        for load in ('quiet', 'busy'):
            with busy_neighbour(load == 'busy'):
                for clock in args.clocks:
                    for restore in restores:
                        restore()
                    ms = time_interleaved(steps, budget_s=args.budget, clock=clock)
                    rows.append('| %s | %s | %s | %.3f | %.3f | %.2f |' % (
                        target, clock, load, ms[first], ms[second], ms[first] / ms[second]))
    finally:
        if torch_step is not None:
            torch_step.close()
    return rows


def main(argv=None):
    """Print the targets' table (the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[1])
    parser.add_argument('--targets', nargs='+', choices=sorted(TARGETS), default=sorted(TARGETS))
    parser.add_argument('--clocks', nargs='+', choices=sorted(CLOCKS), default=['wall', 'cpu'])
    parser.add_argument('--budget', type=float, default=2.0,
                        help='seconds of timed calls per implementation, clock and load')
    parser.add_argument('--torch-python', default='.venv-torch/bin/python')
    parser.add_argument('--pretrain', type=int, default=1,
                        help='steps each in-process implementation trains first; every row '
                        'then times the steps after them (Adam on the MLP: subnormal moments '
                        'from about 700)')
    args = parser.parse_args(argv)
    print('threads: OMP_NUM_THREADS=%s CHAINER_COMPILER_THREADS=%s' % (
        os.environ.get('OMP_NUM_THREADS'), os.environ.get('CHAINER_COMPILER_THREADS')))
    print('| target | clock | load | first (ms) | second (ms) | ratio |')
    print('|---|---|---|---|---|---|')
    for target in args.targets:
        for row in _target_rows(target, args):
            print(row, flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
