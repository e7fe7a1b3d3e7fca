"""ImageNet-style datasets: which images there are, and how an image becomes
a training or a validation example.

A dataset argument is either a directory with one sub-directory per class
(classes numbered in sorted name order) or a text file of
``relative/path label`` lines, the paths relative to ``--root``, as
Chainer's own ImageNet example reads them.  Images are decoded with Pillow.

Datasets come from elsewhere: every file is opened only if it is a regular
file (a FIFO would block forever, a device never end), an image only in one
of IMAGE_FORMATS and up to MAX_IMAGE_PIXELS, and anything wrong is a
DatasetError naming the file.
"""
import os
import stat

import chainer
import numpy
from PIL import Image

#: Per-channel (RGB) mean of ImageNet's training images, in [0, 255]: the
#: default when no --mean file is given.
IMAGENET_MEAN = numpy.array([123.68, 116.78, 103.94], numpy.float32)

#: Suffixes of the files a class directory contributes (case-insensitive).
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.ppm', '.gif', '.webp')

#: The Pillow formats images may be in, whatever their suffix: Pillow would
#: otherwise pick any of its plugins by content (EPS runs Ghostscript).
IMAGE_FORMATS = ('JPEG', 'PNG', 'BMP', 'PPM', 'GIF', 'WEBP')

#: The most pixels an image may have, read from its header before it is
#: decoded: 2**25 (about 33.5 million, 8192 x 4096; ImageNet's photos have
#: well under a million).  Decoded as RGB that is 100 MiB per image and
#: loader process; Pillow's own limit (89 million) is far above that.
MAX_IMAGE_PIXELS = 2 ** 25

#: The most decimal digits of a label in a list file: labels fit int32.
MAX_LABEL_DIGITS = 9


class DatasetError(ValueError):
    """A dataset argument or one of its images is unusable; the message
    names the file (and line) and the problem."""


def open_regular(path):
    """``path`` opened for reading bytes, if it is a regular file (symbolic
    links followed); otherwise DatasetError.  The open does not block, so a
    FIFO is refused instead of waiting for a writer forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except ValueError as e:  # a NUL byte in the path
        raise DatasetError('%r: %s' % (path, e)) from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DatasetError('%s is not a regular file' % path)
        return os.fdopen(fd, 'rb')
    except BaseException:
        os.close(fd)
        raise


def read_pairs(source, root='.'):
    """(image path, label) pairs of ``source``: a class-folder directory or
    a ``path label`` list file whose paths are relative to ``root``."""
    if os.path.isdir(source):
        return _folder_pairs(source)
    if os.path.exists(source):
        return _list_pairs(source, root)
    raise DatasetError('%s: no such dataset directory or list file' % source)


def _folder_pairs(directory):
    classes = sorted(e.name for e in os.scandir(directory) if e.is_dir())
    if not classes:
        raise DatasetError('%s: no class sub-directories' % directory)
    pairs = []
    for label, name in enumerate(classes):
        with os.scandir(os.path.join(directory, name)) as entries:
            images = sorted((e for e in entries if e.name.lower().endswith(IMAGE_SUFFIXES)),
                            key=lambda e: e.name)
        for entry in images:
            # Checked again when opened (the file may change meanwhile);
            # here, so that a FIFO stops the run before training starts.
            if not entry.is_file():
                raise DatasetError('%s is not a regular file' % entry.path)
            pairs.append((entry.path, label))
    if not pairs:
        raise DatasetError('%s: the class sub-directories hold no images (%s)'
                           % (directory, ', '.join(IMAGE_SUFFIXES)))
    return pairs


def _list_pairs(path, root):
    pairs = []
    with open_regular(path) as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode('utf-8')
            except UnicodeDecodeError as e:
                raise DatasetError('%s:%d: not UTF-8 text: %s' % (path, number, e)) from e
            fields = line.split()
            if not fields:
                continue
            # ASCII digits only: str.isdigit() also takes '²' and '٣'.
            if len(fields) != 2 or not (fields[1].isascii() and fields[1].isdigit()) \
                    or len(fields[1]) > MAX_LABEL_DIGITS:
                raise DatasetError('%s:%d: expected "relative/path label" (a label of at most '
                                   '%d digits 0-9), got %r'
                                   % (path, number, MAX_LABEL_DIGITS, line.rstrip('\n')))
            pairs.append((os.path.join(root, fields[0]), int(fields[1])))
    if not pairs:
        raise DatasetError('%s: no images listed' % path)
    return pairs


def load_image(path):
    """The image at ``path``, decoded, as an RGB PIL image; DatasetError
    for a file that is not a regular file, not an image in IMAGE_FORMATS,
    damaged, or larger than MAX_IMAGE_PIXELS."""
    with open_regular(path) as f:
        try:
            image = Image.open(f, formats=IMAGE_FORMATS)
        except Exception as e:  # Pillow fails in many ways on untrusted data
            raise DatasetError('cannot decode image %s: %s' % (path, e)) from e
        with image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise DatasetError('image %s has %d x %d pixels, more than the %d allowed'
                                   % (path, width, height, MAX_IMAGE_PIXELS))
            try:
                return image.convert('RGB')
            except Exception as e:
                raise DatasetError('cannot decode image %s: %s' % (path, e)) from e


def read_npy_header(f, source):
    """(shape, dtype) from the header of the .npy data at ``f``, which is
    left at the start of the data; DatasetError naming ``source`` for
    anything but a .npy header of a version that numpy writes."""
    readers = {(1, 0): numpy.lib.format.read_array_header_1_0,
               (2, 0): numpy.lib.format.read_array_header_2_0}
    try:
        version = numpy.lib.format.read_magic(f)
        shape, _, dtype = readers[version](f)
    except (ValueError, KeyError) as e:
        raise DatasetError('%s is not a .npy array: %s' % (source, e)) from e
    return shape, dtype


def load_mean(path):
    """The per-channel mean: ImageNet's, or the .npy file ``path`` (as
    --compute-mean writes): 3 finite numbers in [0, 255], checked from the
    header before the data is read, never a pickle."""
    if path is None:
        return IMAGENET_MEAN
    with open_regular(path) as f:
        shape, dtype = read_npy_header(f, path)
        if shape != (3,) or dtype.kind not in 'iuf':
            raise DatasetError('%s: expected a per-channel mean, 3 numbers (RGB), got %s %s'
                               % (path, dtype, shape))
        f.seek(0)
        try:
            mean = numpy.load(f, allow_pickle=False)
        except ValueError as e:  # the data is short
            raise DatasetError('%s: %s' % (path, e)) from e
    if not numpy.all((mean >= 0) & (mean <= 255)):  # False for NaN too
        raise DatasetError('%s: the mean must be finite and in [0, 255], got %s' % (path, mean))
    return mean.astype(numpy.float32)


def compute_mean(pairs):
    """Per-channel mean (RGB, [0, 255]) of the images of ``pairs``."""
    total, count = numpy.zeros(3, numpy.float64), 0
    for path, _ in pairs:
        # Summed as float64 without a float64 copy of the image.
        pixels = numpy.asarray(load_image(path)).reshape(-1, 3)
        total += pixels.sum(axis=0, dtype=numpy.float64)
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
        # The center square whose side is 224/256 of the shorter side,
        # resized to crop_size: the image scaled to a shorter side of
        # crop_size * 256 / 224, then center-cropped, without making that
        # scaled image (huge for a long, thin one).
        width, height = image.size
        side = min(width, height) * 224 / 256
        left, top = (width - side) / 2, (height - side) / 2
        return image.resize((self.crop_size, self.crop_size), Image.BILINEAR,
                            box=(left, top, left + side, top + side))
