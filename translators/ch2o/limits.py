"""How much one ch2o translation may do: loops unrolled, calls inlined,
If and Loop bodies nested.  Each is checked before the work it bounds, and
going past it is a TranslationError naming the file and line."""
from .values import TranslationError

#: Loops whose trip count is known at export time (``for`` over a list, a
#: constant ``range``, a ``while`` on a constant condition) are unrolled: one
#: copy of the body per iteration.  Past this many iterations in all, in one
#: export, translation stops (a million-step constant loop would otherwise
#: write a million copies); a single iterable known at export time may not
#: have more items either.
MAX_UNROLLED_ITERATIONS = 100000

#: Inlined calls (methods, functions, lambdas) nest at most this deep: a
#: recursion that the export-time constants do not end stops here, well
#: before Python's own recursion limit.
MAX_CALL_DEPTH = 64

#: ONNX If and Loop bodies nest at most this deep.  Each level nests three
#: protobuf messages (node, attribute, graph), and protobuf readers refuse
#: files nested more than 100 messages deep (at about 31 levels a file
#: cannot be loaded); the margin leaves room for the helper Loops that list
#: slicing and sequence functions add inside a body.
MAX_SUBGRAPH_DEPTH = 24


class Unrolling:
    """The loop iterations one translation has unrolled so far."""

    def __init__(self):
        self.iterations = 0

    def count(self, iterations, site):
        """Count ``iterations`` more, before translating them; refuse past
        MAX_UNROLLED_ITERATIONS."""
        self.iterations += iterations
        if self.iterations > MAX_UNROLLED_ITERATIONS:
            raise TranslationError(site, 'loops whose trip count is known at export time '
                                   'unroll to more than %d iterations in all (one copy of the '
                                   'body each); make the trip count an argument of forward to '
                                   'get an ONNX Loop' % MAX_UNROLLED_ITERATIONS)


def check_static_length(length, site):
    """Refuse an iterable known at export time of more items than
    MAX_UNROLLED_ITERATIONS, before making a value of each."""
    if length > MAX_UNROLLED_ITERATIONS:
        raise TranslationError(site, 'more than %d items known at export time (ch2o makes a '
                               'value of each, and unrolls a loop over them); make the length '
                               'an argument of forward to get an ONNX Loop'
                               % MAX_UNROLLED_ITERATIONS)


def check_call_depth(depth, site):
    """Refuse an inlined call ``depth`` calls deep past MAX_CALL_DEPTH."""
    if depth >= MAX_CALL_DEPTH:
        raise TranslationError(site, 'calls nest more than %d deep (a recursion that the '
                               'constants known at export time do not end?)' % MAX_CALL_DEPTH)


def check_subgraph_depth(scope, site):
    """Refuse an If or Loop in ``scope`` whose body would nest deeper than
    MAX_SUBGRAPH_DEPTH, before translating it."""
    depth = 1
    while scope.parent is not None:
        depth, scope = depth + 1, scope.parent
    if depth > MAX_SUBGRAPH_DEPTH:
        raise TranslationError(site, 'branches and loops that depend on the inputs (each an '
                               'ONNX If or Loop; an exit under one adds one more per statement '
                               'after it) nest more than %d deep' % MAX_SUBGRAPH_DEPTH)
