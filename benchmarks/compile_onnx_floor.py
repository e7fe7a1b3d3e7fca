"""How fast can Chainer + compile_onnx be?  The floor of issue 15's
compile_onnx target: the 784-100-100-10 MLP at batch 8, Adam, L.Classifier
computing accuracy, with the loss and the optimizer in Chainer.

    python benchmarks/compile_onnx_floor.py [--optimizer adam] [--no-accuracy]

Times, interleaved in one run:
- plain Chainer;
- compile_onnx with the native backend, and with its parameters packed
  into one (``pack_parameters=True``);
- the floor: the same Chain, its six Parameters, Classifier and optimizer,
  but a forward FunctionNode that does no work (it returns the logits of
  the first call and zero gradients), so what is left is Chainer's own
  share: the FunctionNode, the loss, the accuracy, backward's bookkeeping
  and the optimizer's update of each Parameter;
- the same floor with the six Parameters packed into one, as
  ``pack_parameters=True`` hands them to the optimizer.

Prints each time and its speed-up over plain Chainer: no compiled forward
and backward, however fast, beats the floor's speed-up.
"""
import argparse
import copy
import os
import sys
import tempfile

import chainer
import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import training_candidates as training  # noqa: E402
from bench import batch_data, initialized_model  # noqa: E402
from timing import time_interleaved  # noqa: E402

import chainer_compiler  # noqa: E402


class _NoWork(chainer.FunctionNode):
    """Returns fixed logits, and zero gradients for every input."""

    def __init__(self, logits):
        self.logits = logits

    def forward(self, inputs):
        self.retain_inputs(tuple(range(len(inputs))))
        return self.logits.copy(),

    def backward(self, indexes, grad_outputs):
        inputs = self.get_retained_inputs()
        return tuple(chainer.Variable(numpy.zeros_like(inputs[i].array)) for i in indexes)


class _Floor(chainer.Chain):
    """``model``'s Parameters (or one Parameter as large as all of them,
    ``packed``) around a forward that does no work."""

    def __init__(self, model, logits, packed):
        super().__init__()
        with self.init_scope():
            if packed:
                size = sum(p.size for p in model.params())
                self.flat = chainer.Parameter(numpy.zeros(size, numpy.float32))
            else:
                self.model = copy.deepcopy(model)
        self.logits = logits

    def forward(self, x):
        return _NoWork(self.logits).apply([x] + list(self.params()))[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--optimizer', default='adam', choices=sorted(training.OPTIMIZERS))
    parser.add_argument('--no-accuracy', dest='accuracy', action='store_false')
    parser.add_argument('--budget', type=float, default=4.0,
                        help='seconds of timed calls per implementation')
    args = parser.parse_args(argv)
    x, t = batch_data((784,), 8)
    model = initialized_model(lambda: models.MLP([784, 100, 100, 10]), x)
    logits = model(x).array
    run = dict(optimizer=args.optimizer, accuracy=args.accuracy)
    with tempfile.TemporaryDirectory() as work:
        onnx_file = os.path.join(work, 'mlp.onnx')
        chainer_compiler.export(model, [x], onnx_file)
        steps = {
            'Chainer': training.chainer_step(model, x, t, **run),
            'compile_onnx, native': training.compile_onnx_step(
                model, x, t, onnx_file=onnx_file, backend='native', **run),
            'compile_onnx, native, packed': training.compile_onnx_step(
                model, x, t, onnx_file=onnx_file, backend='native', pack_parameters=True,
                **run),
        }
        for name, packed in (('floor: no compiled work', False),
                             ('floor, parameters packed into one', True)):
            step = training.optimizer_update_step(_Floor(model, logits, packed), **run)
            steps[name] = lambda step=step: step(x, t)
        for step in steps.values():
            step()
        times = time_interleaved(steps, budget_s=args.budget)
    print('MLP 784-100-100-10, batch 8, %s, accuracy %s; median per iteration'
          % (args.optimizer, 'on' if args.accuracy else 'off'))
    for name, ms in times.items():
        print('  %-36s %7.3f ms  %.2fx faster than Chainer' % (name, ms, times['Chainer'] / ms))


if __name__ == '__main__':
    main()
