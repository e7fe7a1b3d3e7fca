"""The weights of a model emitted with ``weights='file'``: one block of
bytes, laid out here, that the C code reads through offsets instead of
embedding every value as a literal (which makes large models compile
slowly).

The block is each constant array's bytes at a 64-byte aligned offset, in
the order of the arrays' C names.  ``NAME_weights.bin`` is a 32-byte
header followed by the block:

    bytes 0-7    magic b'CCNWGHT1'
    bytes 8-15   layout fingerprint, little-endian uint64
    bytes 16-23  block size in bytes, little-endian uint64
    bytes 24-31  zero

The fingerprint is FNV-1a (64-bit) of the layout (names, dtypes, shapes,
offsets), so the C code refuses a file written for another model, while a
file of new values for the same model (e.g. after more training) loads.
"""
import struct
from dataclasses import dataclass
from typing import BinaryIO

import numpy

from .arena import aligned, aligned_array

MAGIC = b'CCNWGHT1'
HEADER_BYTES = 32


@dataclass
class WeightsLayout:
    """Where each array of ``arrays`` (C name -> array) lives in the block."""
    arrays: dict[str, numpy.ndarray]
    offsets: dict[str, int]
    nbytes: int
    fingerprint: int


def layout(arrays: dict[str, numpy.ndarray]) -> WeightsLayout:
    """The block layout of ``arrays``."""
    offsets, at, text = {}, 0, []
    for name in sorted(arrays):
        a = arrays[name]
        offsets[name] = at
        text.append('%s %s %s %d\n' % (name, a.dtype.name, a.shape, at))
        at += aligned(a.nbytes)
    return WeightsLayout(arrays, offsets, at, fnv1a64(''.join(text).encode()))


def fnv1a64(data: bytes) -> int:
    """The 64-bit FNV-1a hash (the C loader need not know it: the
    fingerprint is a constant in the generated code)."""
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xffffffffffffffff
    return h


def block(weights: WeightsLayout) -> numpy.ndarray:
    """The block's bytes (uint8, little-endian values), starting at a
    64-byte aligned address as its offsets are (arena.aligned_array)."""
    size = max(1, weights.nbytes)
    out = aligned_array(size, numpy.zeros)
    for name, a in weights.arrays.items():
        data = numpy.ascontiguousarray(a, dtype=a.dtype.newbyteorder('<')).view(numpy.uint8)
        out[weights.offsets[name]:weights.offsets[name] + a.nbytes] = data.reshape(-1)
    return out


def write_file(f: BinaryIO, weights: WeightsLayout, data: numpy.ndarray) -> None:
    """Write ``NAME_weights.bin`` to the binary file object ``f``: the
    header, then ``data`` (block(weights))."""
    f.write(MAGIC + struct.pack('<QQQ', weights.fingerprint, weights.nbytes, 0))
    f.write(data[:weights.nbytes].data)
