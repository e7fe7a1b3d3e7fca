"""Keeping the memory the NumPy VM frees in the process, for its next arrays.

The VM frees each array after its last read and NumPy allocates the next
ones moments later, so a training step cycles through its activations'
bytes in arrays of a MiB and more, every step.  glibc's malloc maps large
requests afresh and hands the top of its heap back to the system once
more than its trim threshold lies free there; either way the next step
faults the same pages in again.  Its thresholds adapt to the largest block
freed so far, which a steady training loop would reach, but the recompute
policies make the live bytes rise and fall within a step (and the memory
benchmark interleaves several programs), and there the faults stay: the
plain CNN's ConvTranspose ran 11-19% slower under gt's order than under
chen's, with the same calls, until these thresholds were raised
(benchmarks/NOTES.md, "The allocator, not the order").

Set ``CHAINER_COMPILER_KEEP_FREED_MEMORY=0`` to leave malloc as it is (the
thresholds are the whole process's, Chainer's arrays included).
"""
import ctypes
import os

#: mallopt(3) parameters.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Requests up to this size come from the heap: glibc's largest allowed
#: mmap threshold on 64-bit systems.
MMAP_THRESHOLD = 32 * 2 ** 20
#: Free bytes at the heap's top kept before any go back to the system:
#: more than a step's live bytes rise and fall on the models we train.
TRIM_THRESHOLD = 2 ** 30
#: The environment variable that turns this off ('0').
OPT_OUT = 'CHAINER_COMPILER_KEEP_FREED_MEMORY'

_kept = None


def keep_freed_memory():
    """Raise glibc's mmap and trim thresholds once per process (see the
    module docstring).  Returns whether they are raised: False where
    ``CHAINER_COMPILER_KEEP_FREED_MEMORY=0`` or the C library has no
    mallopt that takes them (not glibc)."""
    global _kept
    if _kept is None:
        _kept = (os.environ.get(OPT_OUT, '1') != '0'
                 and _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                 and _mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _kept


def _mallopt(parameter, value):
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library symbols, or no mallopt (macOS)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return mallopt(parameter, value) == 1
