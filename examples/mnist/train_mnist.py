#!/usr/bin/env python
"""Chainer's MNIST MLP example, trained through chainer-compiler.

Two processes, as the workflow asks:

    python train_mnist.py --export mnist.onnx     # trace the model, write ONNX, exit
    python train_mnist.py --compile mnist.onnx    # compile it and train on the VM

Without either flag it trains with plain Chainer (the baseline), or, with
``--backend numpy`` or ``--backend native``, compiles the whole training step
(forward, loss, backward and Adam's update) with compile_training_step and
trains it through TrainingStepUpdater on that VM backend.
"""
import argparse
import functools

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from chainer import training
from chainer.dataset import concat_examples
from chainer.training import extensions

import chainer_compiler
from chainer_compiler.examples_support import add_workflow_arguments, compile_model, export_model


class MLP(chainer.Chain):

    def __init__(self, n_units, n_out):
        super().__init__()
        with self.init_scope():
            # The input size is inferred: compile_onnx initializes these
            # parameters from the ONNX file's shapes.
            self.l1 = L.Linear(None, n_units)
            self.l2 = L.Linear(None, n_units)
            self.l3 = L.Linear(None, n_out)

    def forward(self, x):
        h1 = F.relu(self.l1(x))
        h2 = F.relu(self.l2(h1))
        return self.l3(h2)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--batchsize', '-b', type=int, default=100)
    parser.add_argument('--epoch', '-e', type=int, default=20)
    parser.add_argument('--iterations', type=int, default=None,
                        help='stop after this many iterations (overrides --epoch)')
    parser.add_argument('--frequency', '-f', type=int, default=-1,
                        help='snapshot frequency in epochs (-1: only at the end)')
    parser.add_argument('--device', '-d', type=str, default='-1',
                        help='device: -1 or @numpy for CPU, 0 or @cupy:0 for GPU 0')
    parser.add_argument('--out', '-o', default='result', help='output directory')
    parser.add_argument('--resume', '-r', type=str, help='resume from this snapshot')
    parser.add_argument('--autoload', action='store_true',
                        help='resume from the newest snapshot in --out')
    parser.add_argument('--unit', '-u', type=int, default=1000, help='hidden units')
    parser.add_argument('--noplot', dest='plot', action='store_false',
                        help='do not write plots')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--backend', choices=['numpy', 'native'], default=None,
                        help='compile the whole training step and run it on this VM backend '
                             '(CPU only; not with --export or --compile)')
    add_workflow_arguments(parser)
    args = parser.parse_args(argv)
    if args.backend is not None and (args.export is not None or args.compile is not None):
        parser.error('--backend compiles the training step from the model itself; '
                     'it does not combine with --export or --compile')
    if args.backend is not None and not args.use_fixed_batch_dataset:
        parser.error('--backend needs the fixed batch size: drop --no-fixed-batch-dataset')
    return args


def main(argv=None):
    args = parse_args(argv)
    device = chainer.get_device(args.device)
    numpy.random.seed(args.seed)
    mlp = MLP(args.unit, 10)

    if args.export is not None:
        export_model(mlp, (args.batchsize, 784), device, args)
        return

    if args.compile is not None:
        check_exported_batch_size(args.compile, args.batchsize)
        mlp = compile_model(mlp, device, args)

    # Padding examples carry label -1: the loss ignores them by default, the
    # accuracy only when told to.
    model = L.Classifier(mlp, accfun=functools.partial(F.accuracy, ignore_label=-1))
    model.to_device(device)
    device.use()
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)

    train, test = chainer_compiler.get_mnist()
    if args.use_fixed_batch_dataset:
        train = chainer_compiler.FixedBatchDataset(train, args.batchsize)
        test = chainer_compiler.FixedBatchDataset(test, args.batchsize)
    train_iter = chainer.iterators.SerialIterator(train, args.batchsize)
    test_iter = chainer.iterators.SerialIterator(test, args.batchsize, repeat=False, shuffle=False)

    if args.backend is None:
        updater = training.updaters.StandardUpdater(train_iter, optimizer, device=device)
    else:
        updater = training_step_updater(model, optimizer, train, train_iter, args)
    stop = (args.iterations, 'iteration') if args.iterations else (args.epoch, 'epoch')
    trainer = training.Trainer(updater, stop, out=args.out)
    trainer.extend(extensions.Evaluator(test_iter, model, device=device))
    frequency = args.epoch if args.frequency == -1 else max(1, args.frequency)
    trainer.extend(extensions.snapshot(n_retains=1, autoload=args.autoload),
                   trigger=(frequency, 'epoch'))
    trainer.extend(extensions.LogReport())
    if args.plot and extensions.PlotReport.available():
        trainer.extend(extensions.PlotReport(['main/loss', 'validation/main/loss'],
                                             'epoch', file_name='loss.png'))
        trainer.extend(extensions.PlotReport(['main/accuracy', 'validation/main/accuracy'],
                                             'epoch', file_name='accuracy.png'))
    trainer.extend(extensions.PrintReport(
        ['epoch', 'main/loss', 'validation/main/loss', 'main/accuracy',
         'validation/main/accuracy', 'elapsed_time']))
    trainer.extend(extensions.ProgressBar())
    if args.resume is not None:
        chainer.serializers.load_npz(args.resume, trainer)
    trainer.run()
    accuracy = trainer.observation.get('validation/main/accuracy')
    if accuracy is not None:
        print('validation accuracy: %.4f' % float(accuracy))


def check_exported_batch_size(path, batchsize):
    """Refuse, before any work, a --batchsize other than the one the file
    was exported with: its compiled program takes batches of that size
    only (FixedBatchDataset pads to --batchsize, so it cannot help)."""
    import onnx
    try:
        dims = onnx.load(path, load_external_data=False).graph.input[0].type.tensor_type \
            .shape.dim
    except Exception:  # a missing or bad file: compile_onnx says what is wrong with it
        return
    exported = dims[0].dim_value if dims else 0
    if exported and exported != batchsize:
        raise SystemExit('%s was exported with batch size %d, not --batchsize %d: train with '
                         '--batchsize %d, or export again with --batchsize %d'
                         % (path, exported, batchsize, exported, batchsize))


def training_step_updater(model, optimizer, train, train_iter, args):
    """A TrainingStepUpdater running the compiled training step of ``model``
    on ``args.backend``; the first batch of ``train`` fixes the shapes (every
    batch has them: the dataset is padded to the batch size)."""
    if model.xp is not numpy:
        raise SystemExit('--backend %s runs on the CPU: use --device -1' % args.backend)
    example = concat_examples(train[:args.batchsize])
    step = chainer_compiler.compile_training_step(model, optimizer, example,
                                                  runtime_kwargs={'backend': args.backend})
    return chainer_compiler.TrainingStepUpdater(train_iter, step)


if __name__ == '__main__':
    main()
