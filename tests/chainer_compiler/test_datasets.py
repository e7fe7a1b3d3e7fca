"""FixedBatchDataset: padded batches have the dtypes a compiled program takes."""
import chainer
import chainer.links as L
import numpy
import pytest
from chainer import training

import chainer_compiler
from tests.models import MLP

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}


def _data(n, label_dtype=numpy.int32):
    rng = numpy.random.RandomState(0)
    x = rng.uniform(-1, 1, (n, 6)).astype(numpy.float32)
    return chainer.datasets.TupleDataset(x, (x[:, 0] > 0).astype(label_dtype))


def test_padding_labels_have_the_datasets_dtype():
    padded = chainer_compiler.FixedBatchDataset(_data(5), 4)
    label = padded[7][1]
    assert label == -1 and type(label) is numpy.int32  # as the dataset's own labels
    batch = chainer.dataset.concat_examples([padded[i] for i in range(4, 8)])
    assert batch[1].dtype == numpy.int32


def test_array_labels_are_padded_as_arrays_of_their_dtype_and_shape():
    rng = numpy.random.RandomState(0)
    pairs = [(rng.standard_normal(3).astype(numpy.float32), numpy.zeros(2, numpy.int16))]
    label = chainer_compiler.FixedBatchDataset(pairs, 2)[1][1]
    assert label.dtype == numpy.int16 and label.tolist() == [-1, -1]


def test_an_ignore_label_the_dtype_cannot_hold_is_refused():
    padded = chainer_compiler.FixedBatchDataset(_data(5, numpy.uint8), 4)
    with pytest.raises(ValueError, match='ignore_label -1 does not fit.*uint8'):
        padded[5]


def test_building_the_dataset_reads_no_example():
    # A damaged example must fail where the iterator meets it (the ImageNet
    # example decides there, on every rank at once, whether to stop).
    class Unread(chainer.dataset.DatasetMixin):
        def __len__(self):
            return 5

        def get_example(self, i):
            raise AssertionError('example %d read' % i)
    assert len(chainer_compiler.FixedBatchDataset(Unread(), 4)) == 8


def test_training_step_updater_trains_on_padded_batches(tmp_path):
    train = chainer_compiler.FixedBatchDataset(_data(20), 8)  # 4 padding examples
    model = L.Classifier(MLP(8, 2))
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    x, t = chainer.dataset.concat_examples([train[i] for i in range(8)])
    step = chainer_compiler.compile_training_step(model, optimizer, (x, t),
                                                  runtime_kwargs=ON_THE_VM)
    iterator = chainer.iterators.SerialIterator(train, 8, shuffle=False)
    updater = chainer_compiler.TrainingStepUpdater(iterator, step)
    training.Trainer(updater, (2, 'epoch'), out=str(tmp_path)).run()
    assert optimizer.t == 6  # every batch ran, the padded last one too
