"""Resuming from a snapshot (``--resume``): the file comes from elsewhere,
so nothing in it may run code or make the process allocate more than the
trainer's own state."""
import math

import chainer
import numpy
from dataset import DatasetError, open_regular, read_npy_header

#: The most bytes a snapshot entry may hold where the trainer does not fix
#: its shape: a count, the log as JSON text, an optimizer's state before the
#: first update (as large as a parameter: ResNet-50's largest is 9 MiB).
MAX_SNAPSHOT_FREE_BYTES = 2 ** 28


class SnapshotError(ValueError):
    """A --resume snapshot is damaged, holds object arrays (pickles) or
    does not fit this run's trainer; the message names the file."""


def load_snapshot(path, trainer):
    """Resume ``trainer`` from the snapshot ``path`` (an .npz that Chainer's
    snapshot extension wrote).  No entry may hold Python objects (NumPy's
    ``allow_pickle=False``), and each entry is checked from its header
    before it is read: it has the shape of the array the trainer holds
    there, or, where the trainer fixes no shape, holds at most
    MAX_SNAPSHOT_FREE_BYTES.  A damaged file is a SnapshotError naming
    it."""
    with open_regular(path) as f:
        if f.read(4) != b'PK\x03\x04':
            raise SnapshotError('%s is not a snapshot (.npz)' % path)
        f.seek(0)
        try:
            with numpy.load(f, allow_pickle=False) as archive:
                for name in archive.files:
                    _entry_header(archive, name, path)
                _CheckedDeserializer(archive, path).load(trainer)
        except (SnapshotError, DatasetError):
            raise
        except Exception as e:  # zipfile, zlib and numpy each fail their own way
            raise SnapshotError('cannot resume from %s: %s: %s'
                                % (path, type(e).__name__, e)) from e


def _entry_header(archive, name, path):
    """(shape, dtype) of the entry ``name``; SnapshotError if it holds
    Python objects."""
    source = '%s, entry %s' % (path, name)
    with archive.zip.open(name + '.npy') as member:
        shape, dtype = read_npy_header(member, source)
    if dtype.hasobject:
        raise SnapshotError('%s holds Python objects (a pickle); snapshots are arrays' % source)
    return shape, dtype


class _CheckedDeserializer(chainer.serializers.NpzDeserializer):
    """Chainer's NpzDeserializer, checking each entry's header against the
    value the trainer holds before the entry is read."""

    def __init__(self, archive, source, path=''):
        super().__init__(archive, path)
        self.source = source

    def __getitem__(self, key):
        return _CheckedDeserializer(self.npz, self.source, self.path + key.strip('/') + '/')

    def __call__(self, key, value):
        name = self.path + key.lstrip('/')
        if name not in self.npz.files:
            raise SnapshotError('%s has no entry %s' % (self.source, name))
        shape, dtype = _entry_header(self.npz, name, self.source)
        if isinstance(value, chainer.get_array_types()):
            wrong = shape != value.shape
        else:  # a count, a text, or None (a state not created yet)
            wrong = math.prod(shape) * dtype.itemsize > MAX_SNAPSHOT_FREE_BYTES
        if wrong:
            raise SnapshotError('%s, entry %s has %s %s, but this run holds %s there'
                                % (self.source, name, dtype, shape, numpy.shape(value)))
        return super().__call__(key, value)
