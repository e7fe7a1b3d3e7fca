"""The training-step implementations compared, each built from a copy of
one initialized Chainer model and returning its loss on the first step."""
import copy
import json
import os
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


def torch_time(torch_python, spec, model, x, t, timeout_s=900):
    """Run torch_reference.py in PyTorch's own virtualenv.  Returns
    (median ms, first loss, versions) or raises RuntimeError saying why not."""
    if not torch_python or not os.path.exists(torch_python):
        raise RuntimeError('no PyTorch environment (make bench-torch-env creates .venv-torch)')
    arrays = {name: numpy.asarray(p.array) for name, p in model.namedparams()}
    for path, link in model.namedlinks():
        for name in ('avg_mean', 'avg_var'):
            if hasattr(link, name):
                arrays['%s/%s' % (path.rstrip('/'), name)] = numpy.asarray(getattr(link, name))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'input.npz')
        numpy.savez(path, spec=json.dumps(spec), x=x, t=t, **arrays)
        script = os.path.join(os.path.dirname(__file__), 'torch_reference.py')
        done = subprocess.run([torch_python, script, path], capture_output=True, text=True,
                              timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError('torch_reference.py failed: %s' % done.stderr.strip()[-300:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result['median_ms'], result['first_loss'], 'torch %s, %d threads' % (
        result['torch'], result['threads'])
