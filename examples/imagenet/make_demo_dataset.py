#!/usr/bin/env python
"""Write a tiny ImageNet-style dataset of synthetic images, for trying
train_imagenet_multi.py offline:

    OUT/train/class_<k>/<i>.png and OUT/val/class_<k>/<i>.png

Class k's images are noisy stripes of their own colour and direction, so
that a network can learn to tell them apart in a few iterations.
"""
import argparse
import os

import numpy
from PIL import Image


def class_image(label, n_classes, size, rng):
    """One RGB uint8 image of class ``label``: stripes whose colour and
    angle depend on the class, at a random phase, plus noise."""
    hue = 2 * numpy.pi * label / n_classes
    colour = 127.5 + 100 * numpy.cos(hue + numpy.array([0, 2, 4]) * numpy.pi / 3)
    angle = numpy.pi * label / n_classes
    y, x = numpy.mgrid[0:size, 0:size]
    wave = numpy.sin((x * numpy.cos(angle) + y * numpy.sin(angle)) / 3 + rng.uniform(0, 6.3))
    pixels = colour * (0.6 + 0.4 * wave[..., None]) + rng.normal(0, 12, (size, size, 3))
    return Image.fromarray(numpy.clip(pixels, 0, 255).astype(numpy.uint8))


def write_split(directory, n_classes, per_class, size_range, rng):
    for label in range(n_classes):
        folder = os.path.join(directory, 'class_%d' % label)
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            size = int(rng.randint(size_range[0], size_range[1] + 1))
            class_image(label, n_classes, size, rng).save(os.path.join(folder, '%d.png' % i))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('out', help='output directory')
    parser.add_argument('--classes', type=int, default=4)
    parser.add_argument('--train-per-class', type=int, default=16)
    parser.add_argument('--val-per-class', type=int, default=4)
    parser.add_argument('--min-size', type=int, default=40, help='smallest image side')
    parser.add_argument('--max-size', type=int, default=64, help='largest image side')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    if not 0 < args.min_size <= args.max_size:
        parser.error('need 0 < --min-size <= --max-size')
    rng = numpy.random.RandomState(args.seed)
    size_range = (args.min_size, args.max_size)
    write_split(os.path.join(args.out, 'train'), args.classes, args.train_per_class,
                size_range, rng)
    write_split(os.path.join(args.out, 'val'), args.classes, args.val_per_class, size_range, rng)
    print('wrote %d classes (%d training, %d validation images each) to %s'
          % (args.classes, args.train_per_class, args.val_per_class, args.out))


if __name__ == '__main__':
    main()
