"""Element-wise arithmetic with NumPy broadcasting as calls into ccn_math.c."""
import numpy

from ..cformat import clist
from ..lowering import Refuse, Step, lowers

#: Highest rank the broadcasting kernel handles (CCN_MAX_RANK in C).
MAX_RANK = 8

_BINARY = {'Add': 'CCN_ADD', 'Sub': 'CCN_SUB', 'Mul': 'CCN_MUL', 'Div': 'CCN_DIV'}


def broadcast_strides(shape, out) -> list[int]:
    """Element strides of a C-order array of ``shape`` read as ``out``
    under NumPy broadcasting: 0 along every broadcast axis."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    result, step = [], 1
    for d in reversed(shape):
        result.append(step if d != 1 else 0)
        step *= d
    return result[::-1]


@lowers(*_BINARY)
def binary(em, inst) -> Step:
    sa, sb = em.shape(inst, 0), em.shape(inst, 1)
    if inst.version < 7 and sa != sb:
        raise Refuse('legacy (opset < 7) broadcasting is not supported')
    try:
        out = tuple(numpy.broadcast_shapes(sa, sb))
    except ValueError:
        raise Refuse('shapes %s and %s do not broadcast' % (list(sa), list(sb))) from None
    if len(out) > MAX_RANK:
        raise Refuse('rank %d is above %d' % (len(out), MAX_RANK))

    def render(ref, scratch):
        return ['{',
                '    static const long shape[] = %s, a_strides[] = %s, b_strides[] = %s;'
                % (clist(out), clist(broadcast_strides(sa, out)),
                   clist(broadcast_strides(sb, out))),
                '    ccn_binary(%s, %d, shape, %s, a_strides, %s, b_strides, %s);'
                % (_BINARY[inst.op], len(out), ref(inst.inputs[0]), ref(inst.inputs[1]),
                   ref(inst.outputs[0])),
                '}']
    return Step('math', [out], render)
