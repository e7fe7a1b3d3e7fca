"""ch2o on a loop over a run-time length: an RNN cell applied T times.

The model's ``forward`` loops ``for t in range(T)`` with T an argument.
ch2o exports it once, as an ONNX Loop whose trip count is an input; the
compiled inference program then runs any T.  (The tracing translator would
have unrolled the loop for the one T it saw.)  Each T is timed against
Chainer's own eager loop on the same weights, after checking that the two
agree.  Prints a Markdown table.
"""
import os
import sys
import tempfile

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from timing import time_interleaved

from chainer_compiler import compile_onnx, export

BATCH, UNITS = 8, 64
LENGTHS = (1, 8, 32, 128)


class RNNCell(chainer.Chain):
    """h_t = tanh(W_x x_t + W_h h_{t-1}), T steps, then a linear readout."""

    def __init__(self, units=UNITS):
        super().__init__()
        with self.init_scope():
            self.input = L.Linear(units, units)
            self.recurrent = L.Linear(units, units, nobias=True)
            self.readout = L.Linear(units, 10)

    def forward(self, xs, steps):
        h = xs[0] * 0
        for t in range(steps):
            h = F.tanh(self.input(xs[t]) + self.recurrent(h))
        return self.readout(h)


def main():
    model = RNNCell()
    rng = numpy.random.RandomState(0)
    xs = rng.uniform(-1, 1, (max(LENGTHS), BATCH, UNITS)).astype(numpy.float32)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, 'rnn.onnx')
        export(model, [xs, 4], path, translator='ch2o')  # exported once, at T = 4
        compiled = compile_onnx(model, path, 'ch2o')
    print('| T | Chainer eager (ms) | ch2o compiled, NumPy VM (ms) | speed-up |')
    print('|---|---|---|---|')
    with chainer.using_config('train', False), chainer.using_config('enable_backprop', False):
        for steps in LENGTHS:
            want = model(xs, steps).array
            got = compiled(xs, numpy.asarray(steps)).array
            numpy.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
            times = time_interleaved({
                'chainer': lambda s=steps: model(xs, s),
                'compiled': lambda s=steps: compiled(xs, numpy.asarray(s)),
            }, budget_s=1.0)
            print('| %d | %.3f | %.3f | %.2fx |' % (steps, times['chainer'], times['compiled'],
                                                    times['chainer'] / times['compiled']))
    return 0


if __name__ == '__main__':
    sys.exit(main())
