"""The training-step implementations compared, each built from a copy of
one initialized Chainer model and returning its loss on the first step."""
import copy
import json
import os
import select
import subprocess
import tempfile

import chainer
import chainer.links as L
import numpy

import chainer_compiler

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
    return step


def chainer_step(model, x, t, optimizer, accuracy=False):
    """Plain Chainer."""
    step = optimizer_update_step(copy.deepcopy(model), optimizer, accuracy)
    return lambda: step(x, t)


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
    return lambda: compiled(x, t)


def first_loss(step):
    loss = step()
    return float(getattr(loss, 'array', loss))


class TorchStep:
    """PyTorch eager in its own virtualenv: torch_reference.py, started on
    ``model``'s arrays and the batch, serving timed steps.  A candidate that
    times itself (timing.time_interleaved): ``timed_calls(n)`` runs ``n``
    steps there and returns their seconds.  ``first_loss`` and ``versions``
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

    def timed_calls(self, n):
        self._process.stdin.write('%d\n' % n)
        self._process.stdin.flush()
        return self._reply()['seconds']

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
