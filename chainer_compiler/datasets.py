"""FixedBatchDataset: pad a dataset to a multiple of the batch size."""
import chainer


class FixedBatchDataset(chainer.dataset.DatasetMixin):
    """Pads ``dataset`` to a multiple of ``batchsize`` so every batch has the
    size a compiled program was exported with.

    Padding examples repeat the first example's input with the label
    ``ignore_label``, which ``F.softmax_cross_entropy`` and ``F.accuracy``
    skip (their default ``ignore_label`` is -1), so padding changes neither
    the loss nor the accuracy.
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
        x, _ = self.dataset[0]
        return x, self.ignore_label
