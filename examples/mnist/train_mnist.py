#!/usr/bin/env python
"""Chainer's MNIST MLP example, trained through chainer-compiler.

Two processes, as the workflow asks:

    python train_mnist.py --export mnist.onnx     # trace the model, write ONNX, exit
    python train_mnist.py --compile mnist.onnx    # compile it and train on the VM

Without either flag it trains with plain Chainer (the baseline).
"""
import argparse
import functools

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from chainer import training
from chainer.training import extensions

import chainer_compiler


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
    parser.add_argument('--export', type=str, default=None,
                        help='export the model to this ONNX file and exit')
    parser.add_argument('--compile', type=str, default=None,
                        help='compile this ONNX file and train with it')
    parser.add_argument('--translator', default='onnx_chainer', choices=['onnx_chainer', 'ch2o'])
    parser.add_argument('--computation-order', type=str, default=None,
                        help='recompute policy of the compiled backward')
    parser.add_argument('--use-unified-memory', action='store_true',
                        help='use CUDA unified memory (GPU only)')
    parser.add_argument('--no-fixed-batch-dataset', dest='use_fixed_batch_dataset',
                        action='store_false',
                        help='do not pad the data to a multiple of the batch size')
    parser.add_argument('--dump-onnx', action='store_true',
                        help='write the compiled forward/backward graphs as ONNX')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    device = chainer.get_device(args.device)
    numpy.random.seed(args.seed)
    mlp = MLP(args.unit, 10)

    if args.export is not None:
        if args.use_unified_memory:
            chainer_compiler.use_unified_memory_allocator()
        mlp.to_device(device)
        x = mlp.xp.zeros((args.batchsize, 784), numpy.float32)
        chainer_compiler.export(mlp, [x], args.export, args.translator)
        print('exported the model to %s' % args.export)
        return

    if args.compile is not None:
        chainer_compiler.use_chainerx_shared_allocator()
        mlp.to_device(device)
        mlp = chainer_compiler.compile_onnx(mlp, args.compile, args.translator,
                                            dump_onnx=args.dump_onnx,
                                            computation_order=args.computation_order)

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

    updater = training.updaters.StandardUpdater(train_iter, optimizer, device=device)
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


if __name__ == '__main__':
    main()
