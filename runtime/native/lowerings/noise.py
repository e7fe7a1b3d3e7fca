"""Training-mode Dropout (DropoutTraining of the org.chainer_compiler
domain, what compile_onnx and compile_training_step make of a Dropout, and
a Dropout whose training mode is a constant true) and its gradient
DropoutGrad, as calls into ccn_noise.c; an inference Dropout is a view.

The mask's random numbers come from the caller, not from C: the emitter
adds a float64 input of the input's shape (``emitter.uniform_input``), and
the caller fills it with ``numpy.random.rand`` at every call, as the NumPy
VM's kernel draws them (runtime/native/library.py does this for the
Executor).  An element is kept when its number is >= ratio; a native run and
a NumPy run from the same NumPy seed therefore drop the same elements."""
import math

from ...ops.registry import CUSTOM_DOMAIN
from ...program import NO_REGISTER
from ..cformat import cfloat, cliteral
from ..lowering import ANY_DTYPE, Refuse, Step, lowers
from .array import view


def _scale(ratio: float) -> str:
    """The float32 literal of the kernels' scale 1 / (1 - ratio), 0 for a
    ratio of 1, as the NumPy kernels round it."""
    return cfloat(1.0 / (1.0 - ratio) if ratio < 1 else 0.0)


@lowers('Dropout')
def dropout(em, inst) -> Step:
    """Dropout: the training kernel when its mode is a constant true (an
    attribute before opset 7, input 2 from 12), else the identity, a view."""
    if inst.version < 7:
        training, ratio = not inst.attrs['is_test'], inst.attrs['ratio']
    elif inst.version < 12:
        training, ratio = False, inst.attrs['ratio']
    else:
        mode = _constant(em, inst, 2, 'training_mode')
        training = mode is not None and bool(mode)
        # The ratio matters only in training (an inference one may be computed).
        ratio = _constant(em, inst, 1, 'ratio') if training else None
        ratio = 0.5 if ratio is None else float(ratio)
    if not training:
        em.only_first_output(inst, 'mask')
        return view(em, inst, em.shape(inst, 0, ANY_DTYPE))
    if inst.attrs.get('seed') is not None:
        raise Refuse('a seeded training Dropout is not supported (its numbers come from '
                     'the caller)')
    if inst.version < 10:
        em.only_first_output(inst, 'mask')  # of the data's type, not bool
    return _training_step(em, inst, float(ratio))


@lowers(CUSTOM_DOMAIN + '::DropoutTraining')
def dropout_training(em, inst) -> Step:
    return _training_step(em, inst, float(inst.attrs['ratio']))


def _training_step(em, inst, ratio: float) -> Step:
    """y = x * mask / (1 - ratio), the mask drawn from the caller's uniform
    numbers (output 1 when something reads it, else scratch)."""
    shape = em.shape(inst, 0)
    if not 0 <= ratio <= 1:
        raise Refuse('ratio %g is outside [0, 1]' % ratio)
    uniforms = em.uniform_input(inst, shape)
    mask = inst.outputs[1] if len(inst.outputs) > 1 and inst.outputs[1] != NO_REGISTER else None

    def render(ref, scratch):
        # Without a mask output (nothing reads it), the mask goes to scratch.
        mask_ref = '(uint8_t *)%s' % scratch if mask is None else ref(mask)
        return ['ccn_dropout_training(%d, %s, %s, %s, %s, %s, %s);'
                % (math.prod(shape), cliteral(ratio, 'float64'), _scale(ratio), ref(inst.inputs[0]),
                   ref(uniforms), ref(inst.outputs[0]), mask_ref)]
    scratch = 0 if mask is not None else -(-math.prod(shape) // 4)  # in floats
    return Step('noise', [shape, shape if mask is not None else None], render,
                scratch=scratch, dtypes=['float32', 'bool'])


@lowers(CUSTOM_DOMAIN + '::DropoutGrad')
def dropout_grad(em, inst) -> Step:
    shape = em.shape(inst, 0)
    if em.shape(inst, 1, ('bool',)) != shape:
        raise Refuse('the mask has shape %s, the gradient %s'
                     % (list(em.shape(inst, 1, ('bool',))), list(shape)))
    ratio, training = (_constant(em, inst, k, name)
                       for k, name in ((2, 'ratio'), (3, 'training_mode')))
    ratio = 0.5 if ratio is None else float(ratio)
    if training is None or not bool(training) or ratio == 0:
        raise Refuse('DropoutGrad outside training mode (the identity) is not lowered')

    def render(ref, scratch):
        return ['ccn_dropout_grad(%d, %s, %s, %s, %s);'
                % (math.prod(shape), _scale(ratio), ref(inst.inputs[0]), ref(inst.inputs[1]),
                   ref(inst.outputs[0]))]
    return Step('noise', [shape], render, in_place=(0,))


def _constant(em, inst, k, name):
    """Input ``k`` of ``inst`` as a constant, None when absent; refused when
    it is computed at run time."""
    if not em.has(inst, k):
        return None
    value = em.const(inst.inputs[k])
    if value is None:
        raise Refuse('the %s (input %d) must be a constant' % (name, k))
    return value
