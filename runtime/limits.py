"""Size limits on work that untrusted input asks for, each checked before
the work it bounds (docs/security.md, "Bounded resources")."""
import math

#: The most elements one value computed ahead of time may have.  The
#: compiler's constant folding and the native emitter's emit-time evaluation
#: both apply it, through may_fold, to the shapes of a node's results before
#: they evaluate it: a few bytes of ConstantOfShape, Expand or Range can ask
#: for gigabytes, and compiling must stay bounded by the size of the file.
#: Larger results are left to run time.
MAX_FOLDED_ELEMENTS = 1 << 20


def may_fold(shapes) -> bool:
    """The size rule of folding: True when each of ``shapes`` (the shapes of
    a node's results, known before it runs) is a sequence of non-negative
    ints with at most MAX_FOLDED_ELEMENTS elements.  An unknown shape (None,
    a symbolic or negative dimension) is not small: False."""
    for shape in shapes:
        if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape) \
                or math.prod(shape) > MAX_FOLDED_ELEMENTS:
            return False
    return True

#: A Program file may hold at most this many times its own size once
#: decompressed (the sizes its zip directory declares, checked before any
#: member is read; zipfile never reads a member past its declared size).
#: save_program stores members as they are, about once the file's size;
#: deflate could make a gigabyte of a megabyte.
MAX_PROGRAM_INFLATION = 16
