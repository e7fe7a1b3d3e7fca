#!/usr/bin/env python
"""Chainer's multi-process ImageNet example (ChainerMN over MPI), trained
through chainer-compiler.

Two parts, as the workflow asks:

    python train_imagenet_multi.py --export resnet50.onnx -B 32
        build the model, write it as ONNX at the per-process batch size, exit
        (one process);
    mpiexec -n N python train_imagenet_multi.py TRAIN VAL --compile resnet50.onnx -B 32
        every process compiles the file and trains on its share of the data;
        gradients are averaged over all processes after every iteration.

Without --export or --compile every process trains the plain Chainer model.
TRAIN and VAL are a directory with one sub-directory per class, or a file
of "relative/path label" lines (paths relative to --root).  --compute-mean
FILE writes TRAIN's per-channel mean for --mean.  See README.md.
"""
import argparse
import functools
import hashlib
import json
import multiprocessing
import os
import sys
import traceback

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import numpy
import onnx
from chainer import training
from chainer.training import extensions
from dataset import (
    DatasetError,
    PreprocessedDataset,
    compute_mean,
    load_mean,
    open_regular,
    read_pairs,
)
from models import MODELS
from snapshots import SnapshotError, load_snapshot

import chainer_compiler
from chainer_compiler.examples_support import add_workflow_arguments, compile_model, export_model
from chainer_compiler.runtime import RuntimeVMError


class ExportMismatchError(ValueError):
    """The ONNX file takes other batches than this run makes."""


#: Failures that are the user's to fix (a path, a file, a flag): every rank
#: reports them in one line and exits with status 2.  Anything else is a
#: bug: the rank that meets it prints its traceback and the error line and
#: aborts every rank (MPI_Abort, status 2).
USER_ERRORS = (DatasetError, ExportMismatchError, SnapshotError, OSError,
               chainer_compiler.InvalidModelError, RuntimeVMError)


class UsageError(Exception):
    """A user error, raised on every rank alike (see ``agree``)."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('train', nargs='?', help='training images: class folders or list file')
    parser.add_argument('val', nargs='?', help='validation images: class folders or list file')
    parser.add_argument('--root', '-R', default='.', help='root of the paths in list files')
    parser.add_argument('--model', '-a', choices=sorted(MODELS), default='resnet50')
    parser.add_argument('--classes', type=int, default=1000, help='number of classes')
    parser.add_argument('--crop-size', type=int, default=224, help='side of the input images')
    parser.add_argument('--mean', '-m', default=None,
                        help='per-channel mean (.npy, RGB, 0-255; default: ImageNet\'s)')
    parser.add_argument('--compute-mean', metavar='FILE', default=None,
                        help='write the per-channel mean of TRAIN to FILE (.npy) and exit')
    parser.add_argument('--communicator', default='naive',
                        help='ChainerMN communicator: naive on CPU, pure_nccl on GPUs')
    parser.add_argument('--device', '-d', default='@numpy',
                        help='@numpy for CPU; @cupy: GPU number intra-node rank of each '
                             'process; @cupy:K: GPU K')
    parser.add_argument('--batchsize', '-B', type=int, default=32,
                        help='batch size of each process')
    parser.add_argument('--lr', type=float, default=None,
                        help='learning rate (default: 0.1 * total batch size / 256)')
    parser.add_argument('--momentum', type=float, default=0.9)
    parser.add_argument('--weight-decay', type=float, default=1e-4,
                        help='L2 rate on all parameters but BatchNormalization\'s')
    parser.add_argument('--epoch', '-E', type=int, default=10)
    parser.add_argument('--iterations', type=int, default=None,
                        help='stop after this many iterations (overrides --epoch)')
    parser.add_argument('--log-interval', type=int, default=None,
                        help='iterations between log lines (default: 1000, or half of '
                             'a smaller --iterations)')
    parser.add_argument('--val-interval', type=int, default=None,
                        help='iterations between validations (default: every epoch, '
                             'or at the end of --iterations)')
    parser.add_argument('--out', '-o', default='result', help='output directory')
    parser.add_argument('--resume', '-r', default=None, help='resume from this snapshot')
    parser.add_argument('--loaderjob', '-j', type=int, default=0,
                        help='image-loading worker processes per MPI process '
                             '(0: load in the training process)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--noplot', dest='plot', action='store_false',
                        help='do not write plots')
    parser.add_argument('--param-digests', action='store_true',
                        help='after every update, append each rank\'s loss and a SHA-256 '
                             'of its parameters to OUT/digests-rank<R>.jsonl')
    add_workflow_arguments(parser)
    args = parser.parse_args(argv)
    _check_args(parser, args)
    return args


def _check_args(parser, args):
    """parser.error (status 2) for flags that cannot work together; every
    rank gets the same command line, so every rank stops alike."""
    if args.export is not None and args.compile is not None:
        parser.error('give --export or --compile, not both')
    if args.compute_mean is not None and args.train is None:
        parser.error('--compute-mean needs TRAIN')
    if args.export is None and args.compute_mean is None and args.val is None:
        parser.error('TRAIN and VAL are required (except with --export)')
    for name in ('batchsize', 'classes', 'crop_size', 'epoch', 'iterations', 'log_interval',
                 'val_interval'):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error('--%s must be positive, got %d' % (name.replace('_', '-'), value))
    if args.loaderjob < 0:
        parser.error('--loaderjob must be 0 or more, got %d' % args.loaderjob)


def main(argv=None):
    """Run the example; the exit status (2: a user error, reported in one
    line on every rank)."""
    args = parse_args(argv)
    if args.compute_mean is not None or args.export is not None:
        try:
            return _single_process(args)
        except USER_ERRORS as e:
            return _fail(e)
    if args.loaderjob:
        # Start the forkserver before MPI initializes: forking an MPI process
        # is unsafe, forking the server is not.
        multiprocessing.set_start_method('forkserver')
        process = multiprocessing.Process()
        process.start()
        process.join()
    comm = chainermn.create_communicator(args.communicator)
    try:
        train(comm, args)
    except UsageError as e:
        return _fail(e)
    except Exception as e:
        # Not at a point where ranks agree (``agree``): the others may be
        # waiting in a collective call, so MPI_Abort stops them all.
        if not isinstance(e, USER_ERRORS):
            traceback.print_exc()
        _fail('%s (on rank %d)' % (e if isinstance(e, USER_ERRORS) else
                                   '%s: %s' % (type(e).__name__, e), comm.rank))
        comm.mpi_comm.Abort(2)
    return 0


def _fail(error):
    """Report a user error the way argparse does; exit status 2."""
    print('%s: error: %s' % (os.path.basename(sys.argv[0]), error), file=sys.stderr, flush=True)
    return 2


def _single_process(args):
    """--compute-mean or --export."""
    if args.compute_mean is not None:
        mean = compute_mean(read_pairs(args.train, args.root))
        numpy.save(args.compute_mean, mean)
        print('mean (RGB) %s written to %s' % (numpy.array2string(mean, precision=2),
                                                args.compute_mean))
        return 0
    numpy.random.seed(args.seed)
    model = MODELS[args.model](args.classes)
    export_model(model, (args.batchsize, 3, args.crop_size, args.crop_size),
                 chainer.get_device(args.device), args)
    return 0


def agree(comm, fn, *args, errors=()):
    """``fn(*args)`` on every rank; if it fails with a user error
    (USER_ERRORS or ``errors``) on any rank, UsageError on every rank,
    naming the failing rank when not all failed.  This is how a bad file
    found by one rank stops all of them instead of leaving the others in
    the next collective call."""
    try:
        result, error = fn(*args), None
    except USER_ERRORS + tuple(errors) as e:
        result, error = None, str(e)
    messages = comm.mpi_comm.allgather(error)
    failed = [rank for rank, message in enumerate(messages) if message is not None]
    if failed:
        where = '' if len(failed) == comm.size else ' (on rank %d)' % failed[0]
        raise UsageError(messages[failed[0]] + where)
    return result


class AgreeingIterator(chainer.dataset.Iterator):
    """``iterator`` whose batches are loaded under ``agree``: an image one
    rank cannot decode stops every rank with that rank's message."""

    _STOP = object()

    def __init__(self, comm, iterator):
        self.comm = comm
        self.iterator = iterator

    def __next__(self):
        batch = agree(self.comm, self._next)
        if batch is self._STOP:
            raise StopIteration
        return batch

    def _next(self):
        try:
            return next(self.iterator)
        except StopIteration:
            return self._STOP

    def __getattr__(self, name):
        # epoch, epoch_detail, is_new_epoch, reset...: the wrapped iterator's.
        if name == 'iterator':
            raise AttributeError(name)
        return getattr(self.iterator, name)

    def serialize(self, serializer):
        self.iterator.serialize(serializer)

    def finalize(self):
        self.iterator.finalize()


def exported_batch_shape(path):
    """The shape of the first data input of the ONNX file ``path``."""
    with open_regular(path) as f:
        try:
            graph = onnx.load_model_from_string(f.read()).graph
        except Exception as e:  # protobuf's DecodeError, ...
            raise chainer_compiler.InvalidModelError('%s is not an ONNX file: %s'
                                                     % (path, e)) from e
    initializers = {t.name for t in graph.initializer}
    data = [v for v in graph.input if v.name not in initializers]
    if not data:
        raise ExportMismatchError('%s has no data input' % path)
    return tuple(d.dim_value for d in data[0].type.tensor_type.shape.dim)


def check_export_shape(path, args):
    """The file must take this run's batches: (batchsize, 3, crop, crop)."""
    shape = exported_batch_shape(path)
    wanted = (args.batchsize, 3, args.crop_size, args.crop_size)
    if shape[0] != wanted[0]:
        raise ExportMismatchError(
            '%s was exported with batch size %d, but --batchsize is %d: export again with '
            '--batchsize %d, or train with --batchsize %d'
            % (path, shape[0], wanted[0], wanted[0], shape[0]))
    if shape != wanted:
        raise ExportMismatchError('%s takes inputs of shape %s, but this run makes %s '
                                  '(--crop-size %d)' % (path, shape, wanted, args.crop_size))


def select_device(spec, comm):
    """``@cupy`` alone: one GPU per process, by its rank within the node."""
    if spec == '@cupy':
        spec = '@cupy:%d' % comm.intra_rank
    return chainer.get_device(spec)


def read_datasets(comm, args):
    """(train pairs, val pairs) on rank 0, None elsewhere; labels checked
    against --classes."""
    if comm.rank != 0:
        return None
    pairs = read_pairs(args.train, args.root), read_pairs(args.val, args.root)
    for source, listed in zip((args.train, args.val), pairs):
        top = max(label for _, label in listed)
        if top >= args.classes:
            raise DatasetError('%s has label %d, but the model has --classes %d'
                               % (source, top, args.classes))
    return pairs


def add_weight_decay(model, rate):
    """A WeightDecay hook on every parameter but BatchNormalization's
    gamma and beta (decaying them only hurts, as in Goyal et al., 2017)."""
    exempt = {id(p) for link in model.links() if isinstance(link, L.BatchNormalization)
              for p in link.params()}
    for param in model.params():
        if id(param) not in exempt:
            param.update_rule.add_hook(chainer.optimizer_hooks.WeightDecay(rate))


class ParameterDigests(training.Extension):
    """Appends ``{"iteration", "loss", "params"}`` to ``path`` after every
    update: this rank's loss and a SHA-256 over its parameters (name,
    bytes), so that ranks can be checked to stay identical."""

    trigger = 1, 'iteration'

    def __init__(self, model, path):
        self.model = model
        self.path = path

    def __call__(self, trainer):
        digest = hashlib.sha256()
        for name, param in sorted(self.model.namedparams()):
            digest.update(name.encode())
            digest.update(numpy.ascontiguousarray(chainer.backend.CpuDevice().send(
                param.array)).tobytes())
        loss = trainer.observation.get('main/loss')
        record = {'iteration': trainer.updater.iteration,
                  'loss': None if loss is None else float(chainer.as_array(loss)),
                  'params': digest.hexdigest()}
        with open(self.path, 'a') as f:
            f.write(json.dumps(record) + '\n')


def make_iterator(comm, dataset, args, train):
    """The agreeing iterator over this rank's share (random order for
    training, seeded per rank)."""
    order = chainer.iterators.ShuffleOrderSampler(
        numpy.random.RandomState(args.seed + comm.rank)) if train else None
    options = dict(repeat=train, shuffle=None if train else False, order_sampler=order)
    if args.loaderjob:
        iterator = chainer.iterators.MultiprocessIterator(
            dataset, args.batchsize, n_processes=args.loaderjob, **options)
    else:
        iterator = chainer.iterators.SerialIterator(dataset, args.batchsize, **options)
    return AgreeingIterator(comm, iterator)


def train(comm, args):
    """Every rank: build (and compile) the model, take its share of the
    data, train with gradients averaged over the ranks."""
    device = select_device(args.device, comm)
    # The data first: a wrong path fails before anything is compiled.
    pairs = agree(comm, read_datasets, comm, args)
    mean = agree(comm, load_mean, args.mean)
    # Rank 0 writes the log and snapshots there mid-training, when the
    # others would be left waiting: a file in the way fails here instead.
    agree(comm, functools.partial(os.makedirs, exist_ok=True), args.out)
    # Same seed everywhere: same initial parameters (ChainerMN broadcasts
    # rank 0's at the first update anyway).
    numpy.random.seed(args.seed)
    model = MODELS[args.model](args.classes)
    if args.compile is not None:
        agree(comm, check_export_shape, args.compile, args)
        # ValueError: a --computation-order that needs options of its own.
        model = agree(comm, compile_model, model, device, args, errors=(ValueError,))
    classifier = L.Classifier(model, accfun=functools.partial(F.accuracy, ignore_label=-1))
    classifier.to_device(device)
    device.use()

    lr = args.lr if args.lr is not None else 0.1 * args.batchsize * comm.size / 256
    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=lr, momentum=args.momentum), comm)
    optimizer.setup(classifier)
    add_weight_decay(classifier, args.weight_decay)

    # Rank 0's lists, shuffled once and split evenly (equal lengths, so
    # every rank runs the same number of iterations and validation batches).
    train_pairs = chainermn.scatter_dataset(pairs and pairs[0], comm, shuffle=True,
                                            seed=args.seed)
    val_pairs = chainermn.scatter_dataset(pairs and pairs[1], comm)
    train_data = PreprocessedDataset(train_pairs, mean, args.crop_size, train=True,
                                     seed=args.seed + comm.rank)
    val_data = PreprocessedDataset(val_pairs, mean, args.crop_size, train=False)
    if args.use_fixed_batch_dataset:
        train_data = chainer_compiler.FixedBatchDataset(train_data, args.batchsize)
        val_data = chainer_compiler.FixedBatchDataset(val_data, args.batchsize)

    updater = training.StandardUpdater(make_iterator(comm, train_data, args, train=True),
                                       optimizer, device=device)
    stop = (args.iterations, 'iteration') if args.iterations else (args.epoch, 'epoch')
    trainer = training.Trainer(updater, stop, out=args.out)
    _extend(trainer, comm, classifier, make_iterator(comm, val_data, args, train=False),
            device, args)
    if args.resume is not None:
        agree(comm, load_snapshot, args.resume, trainer)
    trainer.run(show_loop_exception_msg=False)
    accuracy = trainer.observation.get('validation/main/accuracy')
    if comm.rank == 0 and accuracy is not None:
        print('validation accuracy: %.4f' % float(accuracy))


def _extend(trainer, comm, classifier, val_iter, device, args):
    """Validation on every rank (results averaged over ranks); the log,
    report, plots and snapshots on rank 0 alone."""
    if args.log_interval is not None:
        log_interval = args.log_interval
    elif args.iterations is not None:
        log_interval = max(1, min(1000, args.iterations // 2))
    else:
        log_interval = 1000
    if args.val_interval is not None:
        val_trigger = (args.val_interval, 'iteration')
    else:
        val_trigger = (args.iterations, 'iteration') if args.iterations else (1, 'epoch')
    evaluator = extensions.Evaluator(val_iter, classifier, device=device)
    trainer.extend(chainermn.create_multi_node_evaluator(evaluator, comm), trigger=val_trigger)
    if args.param_digests:
        trainer.extend(ParameterDigests(
            classifier, os.path.join(args.out, 'digests-rank%d.jsonl' % comm.rank)))
    if comm.rank != 0:
        return
    trainer.extend(extensions.snapshot(n_retains=1), trigger=val_trigger)
    trainer.extend(extensions.LogReport(trigger=(log_interval, 'iteration')))
    trainer.extend(extensions.observe_lr(), trigger=(log_interval, 'iteration'))
    if args.plot and extensions.PlotReport.available():
        trainer.extend(extensions.PlotReport(['main/loss', 'validation/main/loss'],
                                             'iteration', trigger=(log_interval, 'iteration'),
                                             file_name='loss.png'))
    trainer.extend(extensions.PrintReport(
        ['epoch', 'iteration', 'main/loss', 'validation/main/loss', 'main/accuracy',
         'validation/main/accuracy', 'lr', 'elapsed_time']),
        trigger=(log_interval, 'iteration'))


if __name__ == '__main__':
    sys.exit(main())
