"""ImageNet-style datasets: which images there are, and how an image becomes
a training or a validation example.

A dataset argument is either a directory with one sub-directory per class
(classes numbered in sorted name order) or a text file of
``relative/path label`` lines, the paths relative to ``--root``, as
Chainer's own ImageNet example reads them.  Images are decoded with Pillow.
"""
import os

import chainer
import numpy
from PIL import Image

#: Per-channel (RGB) mean of ImageNet's training images, in [0, 255]: the
#: default when no --mean file is given.
IMAGENET_MEAN = numpy.array([123.68, 116.78, 103.94], numpy.float32)

#: Suffixes of the files a class directory contributes (case-insensitive).
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.ppm', '.gif', '.webp')


class DatasetError(ValueError):
    """A dataset argument or one of its images is unusable; the message
    names the file (and line) and the problem."""


def read_pairs(source, root='.'):
    """(image path, label) pairs of ``source``: a class-folder directory or
    a ``path label`` list file whose paths are relative to ``root``."""
    if os.path.isdir(source):
        return _folder_pairs(source)
    if os.path.isfile(source):
        return _list_pairs(source, root)
    raise DatasetError('%s: no such dataset directory or list file' % source)


def _folder_pairs(directory):
    classes = sorted(e.name for e in os.scandir(directory) if e.is_dir())
    if not classes:
        raise DatasetError('%s: no class sub-directories' % directory)
    pairs = []
    for label, name in enumerate(classes):
        folder = os.path.join(directory, name)
        pairs.extend((os.path.join(folder, f), label) for f in sorted(os.listdir(folder))
                     if f.lower().endswith(IMAGE_SUFFIXES))
    if not pairs:
        raise DatasetError('%s: the class sub-directories hold no images (%s)'
                           % (directory, ', '.join(IMAGE_SUFFIXES)))
    return pairs


def _list_pairs(path, root):
    pairs = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2 or not fields[1].isdigit():
                raise DatasetError('%s:%d: expected "relative/path label", got %r'
                                   % (path, number, line.rstrip('\n')))
            pairs.append((os.path.join(root, fields[0]), int(fields[1])))
    if not pairs:
        raise DatasetError('%s: no images listed' % path)
    return pairs


def load_image(path):
    """The image at ``path``, decoded, as an RGB PIL image."""
    try:
        with Image.open(path) as image:
            return image.convert('RGB')
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        # PIL reports undecodable data as OSError (UnidentifiedImageError).
        raise DatasetError('cannot decode image %s: %s' % (path, e)) from e


def compute_mean(pairs):
    """Per-channel mean (RGB, [0, 255]) of the images of ``pairs``."""
    total, count = numpy.zeros(3, numpy.float64), 0
    for path, _ in pairs:
        pixels = numpy.asarray(load_image(path), numpy.float64).reshape(-1, 3)
        total += pixels.sum(axis=0)
        count += len(pixels)
    return (total / count).astype(numpy.float32)


class PreprocessedDataset(chainer.dataset.DatasetMixin):
    """(CHW float32 image, int32 label) examples of ``pairs``.

    Training (``train=True``): a random-sized crop (8% to 100% of the area,
    aspect ratio 3/4 to 4/3) resized to ``crop_size`` square, flipped
    horizontally with probability 1/2.  Validation: the shorter side scaled
    to ``crop_size * 256 / 224``, then the center ``crop_size`` square.
    Both subtract the per-channel ``mean`` and scale by 1/255.

    Random draws come from a generator seeded with ``seed`` in the process
    that first draws (a loader worker reseeds with its process id, so that
    workers do not repeat each other's crops): with no worker processes the
    crops are the same on every run.
    """

    def __init__(self, pairs, mean, crop_size, train, seed=0):
        self.pairs = pairs
        self.mean = numpy.asarray(mean, numpy.float32).reshape(1, 1, 3)
        self.crop_size = crop_size
        self.train = train
        self.seed = seed
        self._rng, self._pid = None, None

    def __len__(self):
        return len(self.pairs)

    def get_example(self, i):
        path, label = self.pairs[i]
        image = load_image(path)
        if self.train:
            image = self._random_sized_crop(image)
        else:
            image = self._center_crop(image)
        x = (numpy.asarray(image, numpy.float32) - self.mean) * (1 / 255.)
        return x.transpose(2, 0, 1).copy(), numpy.int32(label)

    def _random(self):
        pid = os.getpid()
        if self._pid is None:
            self._rng, self._pid = numpy.random.RandomState(self.seed), pid
        elif self._pid != pid:
            self._rng, self._pid = numpy.random.RandomState([self.seed, pid]), pid
        return self._rng

    def _random_sized_crop(self, image):
        rng = self._random()
        width, height = image.size
        w, h = width, height
        for _ in range(10):
            area = width * height * rng.uniform(0.08, 1.0)
            ratio = numpy.exp(rng.uniform(numpy.log(3 / 4), numpy.log(4 / 3)))
            w, h = int(round(numpy.sqrt(area * ratio))), int(round(numpy.sqrt(area / ratio)))
            if 0 < w <= width and 0 < h <= height:
                break
        else:  # no draw fit: the whole image
            w, h = width, height
        left, top = rng.randint(0, width - w + 1), rng.randint(0, height - h + 1)
        size = (self.crop_size, self.crop_size)
        image = image.resize(size, Image.BILINEAR, box=(left, top, left + w, top + h))
        if rng.randint(2):
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return image

    def _center_crop(self, image):
        width, height = image.size
        scale = self.crop_size * 256 / 224 / min(width, height)
        width, height = max(self.crop_size, round(width * scale)), \
            max(self.crop_size, round(height * scale))
        image = image.resize((width, height), Image.BILINEAR)
        left, top = (width - self.crop_size) // 2, (height - self.crop_size) // 2
        return image.crop((left, top, left + self.crop_size, top + self.crop_size))
