"""examples/imagenet with hostile input: datasets, --mean files and
--resume snapshots from elsewhere are refused with one line naming the file
(never a hang, a traceback or code from a pickle)."""
import os
import pickle
import shutil
import struct
import zipfile
import zlib

import chainer
import chainer.links as L
import numpy
import pytest
from PIL import Image

from tests.examples.test_imagenet_multi import (
    EXAMPLE,
    MODEL_FLAGS,
    SCRIPT,
    _assert_fails_on_every_rank,
    _load,
    _python,
    mpirun,
)


@pytest.fixture(scope='module')
def dataset():
    return _load('dataset')


@pytest.fixture(scope='module')
def snapshots():
    # snapshots.py imports dataset.py as the script does, from its folder.
    import sys
    sys.path.insert(0, EXAMPLE)
    try:
        return _load('snapshots')
    finally:
        sys.path.remove(EXAMPLE)


@pytest.fixture(scope='module')
def demo(tmp_path_factory):
    """A demo dataset of 2 classes, 4 training and 2 validation images each."""
    path = tmp_path_factory.mktemp('hostile')
    made = _python(os.path.join(EXAMPLE, 'make_demo_dataset.py'), 'data', '--classes', '2',
                   '--train-per-class', '4', '--val-per-class', '2', cwd=path)
    assert made.returncode == 0, made.stderr
    return path


def _class_folder(tmp_path, names=('a.png',)):
    folder = tmp_path / 'train' / 'class_0'
    folder.mkdir(parents=True)
    for name in names:
        Image.new('RGB', (8, 8), (10, 20, 30)).save(folder / name)
    return folder


# -- FIFOs and other files that are not regular files -------------------------------------
def test_a_fifo_in_a_class_folder_is_refused_when_listing(dataset, tmp_path):
    folder = _class_folder(tmp_path)
    os.mkfifo(folder / 'b.png')
    with pytest.raises(dataset.DatasetError, match=r'class_0/b.png is not a regular file'):
        dataset.read_pairs(str(tmp_path / 'train'))


@pytest.mark.parametrize('what', ['image', 'list'])
def test_opening_a_fifo_is_refused_without_waiting_for_a_writer(dataset, tmp_path, what):
    fifo = str(tmp_path / 'fifo')
    os.mkfifo(fifo)
    with pytest.raises(dataset.DatasetError, match='fifo is not a regular file'):
        dataset.load_image(fifo) if what == 'image' else dataset.read_pairs(fifo)


def test_compute_mean_over_a_folder_holding_a_fifo_ends_with_status_2(tmp_path):
    # The old example opened the FIFO and waited for a writer forever.
    folder = _class_folder(tmp_path)
    os.mkfifo(folder / 'b.png')
    run = _python(SCRIPT, 'train', '--compute-mean', 'mean.npy', cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count('\n') == 1 and 'b.png is not a regular file' in run.stderr
    assert not (tmp_path / 'mean.npy').exists()


@pytest.mark.slow  # two MPI ranks: seconds of start-up
def test_a_fifo_in_the_dataset_stops_both_ranks_with_status_2(demo, tmp_path):
    # The old example started training; the rank whose batch held the FIFO
    # waited in open() for a writer, the other in the next all-reduce.
    data = tmp_path / 'data'
    shutil.copytree(demo / 'data', data)
    os.mkfifo(data / 'train' / 'class_1' / '9.png')
    run = mpirun(str(data / 'train'), str(data / 'val'), *MODEL_FLAGS[:-1], '2',
                 '--iterations', '2', '--out', str(tmp_path / 'out'), cwd=demo)
    _assert_fails_on_every_rank(run, 'class_1/9.png is not a regular file (on rank 0)')
    assert 'Traceback' not in run.stderr


# -- list files --------------------------------------------------------------------------
@pytest.mark.parametrize('label', ['\u0663', '\u00b2', '1' * 5000, '-1', '1e3'])
def test_labels_are_at_most_nine_ascii_digits(dataset, tmp_path, label):
    # '٣' and '²' pass str.isdigit(); int() takes the first and fails on the
    # second, and on 5000 digits.
    listing = tmp_path / 'train.txt'
    listing.write_text('a.png 1\nb.png %s\n' % label, encoding='utf-8')
    with pytest.raises(dataset.DatasetError, match=r'train.txt:2: expected "relative/path '
                                                   r'label" \(a label of at most 9 digits'):
        dataset.read_pairs(str(listing))


@pytest.mark.parametrize('content, message', [
    (b'a.png 1\n\xff.png 2\n', r'train.txt:2: not UTF-8 text'),
    (b'a\x00.png 1\n', r"a\\x00.png': embedded null byte"),
])
def test_list_files_that_are_not_text_or_name_no_path(dataset, tmp_path, content, message):
    listing = tmp_path / 'train.txt'
    listing.write_bytes(content)
    with pytest.raises(dataset.DatasetError, match=message):
        for path, _ in dataset.read_pairs(str(listing)):
            dataset.load_image(path)


# -- images --------------------------------------------------------------------------------
def _png_header(width, height):
    """A PNG that declares ``width`` x ``height`` RGB pixels and holds one
    row: what Pillow reads before decoding, without the data."""
    def chunk(kind, data):
        return struct.pack('>I', len(data)) + kind + data + struct.pack(
            '>I', zlib.crc32(kind + data))
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height,
                                                             8, 2, 0, 0, 0))
            + chunk(b'IDAT', zlib.compress(b'\0' * (1 + 3 * width))) + chunk(b'IEND', b''))


def test_an_image_over_the_pixel_limit_is_refused_from_its_header(dataset, tmp_path):
    # 6000 x 6000 is under Pillow's own limit (89 million): the old example
    # decoded 108 MB for it (and 864 MB more in --compute-mean).
    path = tmp_path / 'big.png'
    path.write_bytes(_png_header(6000, 6000))
    with pytest.raises(dataset.DatasetError, match=r'big.png has 6000 x 6000 pixels, more '
                                                   r'than the 33554432 allowed'):
        dataset.load_image(str(path))


def test_images_only_in_the_listed_formats(dataset, tmp_path):
    path = tmp_path / 'a.png'
    Image.new('RGB', (8, 8)).save(path, format='TIFF')
    with pytest.raises(dataset.DatasetError, match='cannot decode image .*a.png'):
        dataset.load_image(str(path))


def test_a_long_thin_image_is_center_cropped_without_scaling_it_whole(dataset, tmp_path):
    # Scaled to a shorter side of 292 first, 4096 x 1 would be 1.2 million
    # x 292 pixels.
    Image.new('RGB', (4096, 1), (200, 100, 50)).save(tmp_path / 'thin.png')
    examples = dataset.PreprocessedDataset([(str(tmp_path / 'thin.png'), 0)],
                                           numpy.zeros(3), 256, train=False)
    x, _ = examples[0]
    assert x.shape == (3, 256, 256)
    numpy.testing.assert_allclose(x[:, 0, 0], numpy.array([200, 100, 50]) / 255, rtol=1e-6)


# -- --mean files ----------------------------------------------------------------------------
def _npy_header(shape, descr='<f4'):
    """A .npy file holding only a header that declares ``shape``."""
    header = repr({'descr': descr, 'fortran_order': False, 'shape': shape}).encode()
    header += b' ' * (-(len(header) + 11) % 64) + b'\n'
    return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header


@pytest.mark.parametrize('write, message', [
    (lambda p: numpy.save(p, numpy.array([1, 2, 3], object), allow_pickle=True),
     'expected a per-channel mean, 3 numbers .RGB., got object'),
    (lambda p: open(p, 'wb').write(_npy_header((2 ** 40,))),
     r'got float32 \(1099511627776,\)'),
    (lambda p: open(p, 'wb').write(_npy_header((3,))), 'mean.npy: .*'),
    (lambda p: numpy.save(p, numpy.array([1, numpy.nan, 3])), 'must be finite and in'),
    (lambda p: numpy.save(p, numpy.zeros((3, 4))), r'got float64 \(3, 4\)'),
    (lambda p: open(p, 'wb').write(pickle.dumps([1, 2, 3])), 'mean.npy is not a .npy array'),
    (lambda p: os.mkfifo(p), 'mean.npy is not a regular file'),
])
def test_hostile_mean_files_are_refused(dataset, tmp_path, write, message):
    path = str(tmp_path / 'mean.npy')
    write(path)
    with pytest.raises(dataset.DatasetError, match=message):
        dataset.load_mean(path)


def test_a_mean_file_written_by_compute_mean_loads(dataset, tmp_path):
    path = str(tmp_path / 'mean.npy')
    numpy.save(path, numpy.array([1, 2.5, 255], numpy.float64))
    mean = dataset.load_mean(path)
    assert mean.dtype == numpy.float32 and mean.tolist() == [1, 2.5, 255]


# -- --resume snapshots ----------------------------------------------------------------------
def _trainer(out):
    model = L.Classifier(L.Linear(3, 2))
    optimizer = chainer.optimizers.MomentumSGD()
    optimizer.setup(model)
    data = [(numpy.ones(3, numpy.float32), numpy.int32(1))] * 4
    updater = chainer.training.StandardUpdater(
        chainer.iterators.SerialIterator(data, 2), optimizer)
    return chainer.training.Trainer(updater, (2, 'iteration'), out=str(out)), model


@pytest.fixture
def snapshot(tmp_path):
    """A snapshot of a trainer after 2 iterations, and that trainer's model."""
    trainer, model = _trainer(tmp_path)
    trainer.run()
    path = str(tmp_path / 'snapshot')
    chainer.serializers.save_npz(path, trainer)
    return path, model


def test_a_snapshot_resumes(snapshots, snapshot, tmp_path):
    path, trained = snapshot
    trainer, model = _trainer(tmp_path)
    snapshots.load_snapshot(path, trainer)
    assert trainer.updater.iteration == 2
    numpy.testing.assert_array_equal(model.predictor.W.array, trained.predictor.W.array)


def _rewrite(path, edit):
    """Rewrite the snapshot ``path`` with entries ``edit(name, array)``."""
    with numpy.load(path) as archive:
        arrays = {name: edit(name, archive[name]) for name in archive.files}
    with open(path, 'wb') as f:
        numpy.savez(f, **arrays)


def test_a_snapshot_with_an_object_array_is_refused_unread(snapshots, snapshot, tmp_path,
                                                           monkeypatch):
    path, _ = snapshot
    _rewrite(path, lambda name, a: numpy.array([print], object)
             if name.endswith('iteration') else a)
    monkeypatch.setattr(pickle, 'loads', None)  # unpickling would fail differently
    trainer, _ = _trainer(tmp_path)
    with pytest.raises(snapshots.SnapshotError,
                       match=r'entry updater/iteration holds Python objects \(a pickle\)'):
        snapshots.load_snapshot(path, trainer)


def test_a_snapshot_entry_of_another_shape_is_refused(snapshots, snapshot, tmp_path):
    # numpy.copyto would broadcast a (1,) entry over the whole parameter.
    path, _ = snapshot
    _rewrite(path, lambda name, a: a[:1] if name.endswith('predictor/W') else a)
    trainer, _ = _trainer(tmp_path)
    with pytest.raises(snapshots.SnapshotError, match=r'predictor/W has float32 \(1, 3\), but '
                                                      r'this run holds \(2, 3\) there'):
        snapshots.load_snapshot(path, trainer)


@pytest.mark.parametrize('keep', [0.5, 0.9])
def test_a_truncated_snapshot_is_a_clear_error(snapshots, snapshot, tmp_path, keep):
    path, _ = snapshot
    data = open(path, 'rb').read()
    open(path, 'wb').write(data[:int(len(data) * keep)])
    trainer, _ = _trainer(tmp_path)
    with pytest.raises(snapshots.SnapshotError, match='cannot resume from .*snapshot: '):
        snapshots.load_snapshot(path, trainer)


def test_a_snapshot_that_is_not_a_zip_archive_is_refused(snapshots, tmp_path):
    path = tmp_path / 'snapshot'
    path.write_bytes(pickle.dumps({'updater/iteration': 1}))
    trainer, _ = _trainer(tmp_path)
    with pytest.raises(snapshots.SnapshotError, match='is not a snapshot'):
        snapshots.load_snapshot(str(path), trainer)
    assert zipfile.is_zipfile(path) is False


def test_a_snapshot_entry_larger_than_the_limit_is_refused_unread(snapshots, snapshot, tmp_path):
    # The optimizer's state does not exist before the first update, so the
    # trainer fixes no shape for it: the size limit applies.
    path, _ = snapshot
    name = 'updater/optimizer:main/predictor/W/v'
    with numpy.load(path) as archive:
        arrays = {n: archive[n] for n in archive.files if n != name}
    with open(path, 'wb') as f:
        numpy.savez(f, **arrays)
    with zipfile.ZipFile(path, 'a') as archive:
        archive.writestr(name + '.npy', _npy_header((2 ** 30,)))
    trainer, _ = _trainer(tmp_path)
    with pytest.raises(snapshots.SnapshotError, match=r'W/v has float32 \(1073741824,\), but '
                                                      r'this run holds \(\) there'):
        snapshots.load_snapshot(path, trainer)


@pytest.mark.slow
def test_an_error_on_one_rank_between_checks_ends_every_rank_with_status_2(demo, tmp_path):
    # Rank 0 fails in its log extension while rank 1 waits in the next
    # all-reduce: the old example aborted with status 1 after ChainerMN's
    # banner; now one error line naming the rank, then MPI_Abort(2).
    wrapper = tmp_path / 'wrapper.py'
    wrapper.write_text(
        'import os, runpy, sys\n'
        'from chainer.training import extensions\n'
        'def fail(self, trainer):\n'
        '    raise RuntimeError("the log extension broke")\n'
        'if os.environ["OMPI_COMM_WORLD_RANK"] == "0":\n'
        '    extensions.LogReport.__call__ = fail\n'
        'sys.argv = sys.argv[1:]\n'
        'sys.path.insert(0, os.path.dirname(sys.argv[0]))\n'
        'runpy.run_path(sys.argv[0], run_name="__main__")\n')
    run = mpirun(SCRIPT, 'data/train', 'data/val', *MODEL_FLAGS[:-1], '2', '--iterations', '4',
                 '--out', str(tmp_path / 'out'), '--noplot', cwd=demo, script=str(wrapper))
    assert run.returncode == 2, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if ': error: ' in line]
    assert lines == ['train_imagenet_multi.py: error: RuntimeError: the log extension broke '
                     '(on rank 0)'], run.stderr


@pytest.mark.slow  # two MPI ranks: seconds of start-up
def test_an_out_folder_that_is_a_file_stops_every_rank_before_training(demo, tmp_path):
    (tmp_path / 'out').write_text('')
    run = mpirun('data/train', 'data/val', *MODEL_FLAGS[:-1], '2', '--iterations', '4',
                 '--out', str(tmp_path / 'out'), '--noplot', cwd=demo)
    _assert_fails_on_every_rank(run, 'File exists')
