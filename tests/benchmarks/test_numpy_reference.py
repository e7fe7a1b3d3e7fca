"""The hand-written NumPy training step (benchmarks/numpy_reference.py)
computes what Chainer computes: same losses, same parameters and
BatchNormalization statistics after two steps of each optimizer."""
import os
import sys

import chainer
import chainer.links as L
import numpy
import pytest

# The benchmark scripts are not a package; put their directory (not tests/,
# whose chainer_compiler would shadow the real one) on the path.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks'))
import models  # noqa: E402
from numpy_reference import numpy_step  # noqa: E402

CASES = {
    'mlp': (lambda: models.MLP([784, 100, 100, 10]), (8, 784)),
    'lenet5': (models.LeNet5, (4, 1, 28, 28)),
    'resnet18style': (lambda: models.ResNet18Style(width=4), (2, 3, 32, 32)),
}

OPTIMIZERS = {
    'sgd': lambda: chainer.optimizers.SGD(lr=0.01),
    'momentum': lambda: chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9),
    'adam': lambda: chainer.optimizers.Adam(alpha=0.001, beta1=0.9, beta2=0.999, eps=1e-8),
}



def _model_and_batch(case):
    make, shape = CASES[case]
    numpy.random.seed(0)  # Chainer's initializers draw from numpy.random
    model = make()
    rng = numpy.random.RandomState(1)
    x = rng.uniform(-1, 1, shape).astype(numpy.float32)
    t = rng.randint(0, 10, shape[0]).astype(numpy.int32)
    return model, x, t


def _chainer_losses(model, x, t, optimizer, steps):
    classifier = L.Classifier(model)
    classifier.compute_accuracy = False
    opt = OPTIMIZERS[optimizer]()
    opt.setup(classifier)
    losses = []
    for _ in range(steps):
        opt.update(classifier, x, t)
        losses.append(float(classifier.loss.array))
    return losses


def _batch_norm_statistics(model):
    return {path + '/' + name: getattr(link, name)
            for path, link in model.namedlinks() if isinstance(link, L.BatchNormalization)
            for name in ('avg_mean', 'avg_var')}


def _assert_params_close(actual, expected, optimizer, path):
    if optimizer != 'adam':
        numpy.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5, err_msg=path)
        return
    # Adam moves a parameter by up to alpha=1e-3 a step however small its
    # gradient, so a gradient that is zero but for float32 rounding (~1e-7,
    # summed in a different order by Chainer and by NumPy) can move it by
    # different amounts.  Allow that on a few elements, within the two steps.
    far = ~numpy.isclose(actual, expected, rtol=1e-4, atol=1e-5)
    assert far.sum() <= 1 + far.size // 1000, path
    numpy.testing.assert_allclose(actual, expected, atol=2e-3, err_msg=path)


@pytest.mark.parametrize('optimizer', sorted(OPTIMIZERS))
@pytest.mark.parametrize('case', sorted(CASES))
def test_two_steps_match_chainer(case, optimizer):
    model, x, t = _model_and_batch(case)
    step = numpy_step(model, x, t, optimizer)
    numpy_losses = [step(), step()]
    # Chainer trains the same model object afterwards: this also checks that
    # numpy_step left its parameters and statistics alone.
    chainer_losses = _chainer_losses(model, x, t, optimizer, steps=2)

    numpy.testing.assert_allclose(numpy_losses, chainer_losses, rtol=1e-4)
    params = dict(model.namedparams())
    assert set(step.params) == set(params)
    for path, param in params.items():
        _assert_params_close(step.params[path], param.array, optimizer, path)
    stats = _batch_norm_statistics(model)
    assert set(step.stats) == set(stats)
    for path, value in stats.items():
        numpy.testing.assert_allclose(step.stats[path], value, rtol=1e-4, atol=1e-5,
                                      err_msg=path)


def test_accuracy_is_the_classifiers():
    model, x, t = _model_and_batch('mlp')
    # Half the labels are the model's own predictions: the accuracy is at
    # least 0.5 and depends on the other half.
    t[:4] = model(x[:4]).array.argmax(axis=1)
    step = numpy_step(model, x, t, 'sgd', accuracy=True)
    assert step.accuracy is None
    step()
    classifier = L.Classifier(model)
    classifier(x, t)
    assert 0.5 <= float(classifier.accuracy.array) < 1
    assert step.accuracy == float(classifier.accuracy.array)


def test_loss_decreases():
    model, x, t = _model_and_batch('lenet5')
    step = numpy_step(model, x, t, 'sgd')
    losses = [step() for _ in range(5)]
    assert losses[-1] < losses[0]


def test_unknown_model_class_is_named():
    with pytest.raises(TypeError, match='Linear'):
        numpy_step(L.Linear(3, 2), numpy.zeros((1, 3), numpy.float32),
                   numpy.zeros(1, numpy.int32))


def test_unknown_optimizer():
    model, x, t = _model_and_batch('mlp')
    with pytest.raises(ValueError, match='rmsprop'):
        numpy_step(model, x, t, 'rmsprop')
