"""GraphBuilder: collects ONNX nodes and initializers, and knows per opset
which form an operator takes (axes as attribute or input, and the like), so
the translators and the gradient rules state what they mean once.

Pure onnx + NumPy, plus the runtime's version rules (stdlib only), which
the kernels read too: the translators and the compiler both build on it."""
import numpy
from onnx import helper, numpy_helper

from .runtime.ops.opset_rules import axes_are_input, batch_norm_training_form


class GraphBuilder:
    """Accumulates nodes and initializers for one ONNX graph."""

    def __init__(self, opset):
        self.opset = opset
        self.nodes = []
        self.initializers = []
        self.extra_outputs = []  # (name, array) graph outputs beyond the model's
        self._taken = set()
        self._counters = {}  # hint -> its last number
        self._deferred = {}  # value name -> (names, emit): see defer()

    # -- names and raw nodes ----------------------------------------------
    def reserve(self, name):
        """Mark ``name`` as used (inputs, parameters, outputs)."""
        self._taken.add(name)
        return name

    def fresh(self, hint):
        """A value name not used yet, derived from ``hint``.  Numbered per
        hint, so names made for a variable count of values of one kind
        (rows of a batch) leave other names the same (dynamic_axes compares
        two traces)."""
        number = self._counters.get(hint, 0)
        while True:
            number += 1
            name = '%s_%d' % (hint, number)
            if name not in self._taken:
                self._counters[hint] = number
                return self.reserve(name)

    def node(self, op, inputs, outputs=1, domain='', **attrs):
        """Add one node.  ``outputs`` is a count (fresh names) or a list of
        names.  Returns the output name, or the list for several outputs."""
        if isinstance(outputs, int):
            outputs = [self.fresh(op) for _ in range(outputs)]
        self._demand(inputs)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op, list(inputs), list(outputs),
                                           name='%s_%d' % (op, len(self.nodes)),
                                           domain=domain or None, **attrs))
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def defer(self, names, emit):
        """Call ``emit()`` (which adds the nodes making ``names``) only when
        a node or a graph output first reads one of ``names``: values a
        later converter may read whole another way (F.transpose_sequence's
        rows under F.stack) leave no node per row in the file."""
        for name in names:
            self._deferred[name] = (names, emit)

    def _demand(self, names):
        for name in names:
            entry = self._deferred.get(name)
            if entry is not None:
                for other in entry[0]:
                    del self._deferred[other]
                entry[1]()

    def initializer(self, name, array):
        """Add an initializer under an exact name (parameters)."""
        self.reserve(name)
        self.initializers.append(numpy_helper.from_array(numpy.asarray(array), name))
        return name

    def constant(self, value, dtype=None, hint='const'):
        """Add a constant as an initializer; return its name."""
        array = numpy.asarray(value, dtype=dtype)
        return self.initializer(self.fresh(hint), array)

    def int64s(self, values):
        """A 1-D int64 constant (shapes, axes, pads ...)."""
        return self.constant(numpy.asarray(values, dtype=numpy.int64).reshape(-1), hint='ints')

    @staticmethod
    def _out(out):
        return [out] if out else 1

    def add_output(self, name, array):
        """Make value ``name`` (shaped like ``array``) a graph output too,
        e.g. the updated running averages of a training-mode export."""
        self.extra_outputs.append((name, array))

    # -- operators whose form depends on the opset ---------------------------
    def squeeze(self, x, axes, out=None):
        return self._with_axes('Squeeze', x, axes, out)

    def unsqueeze(self, x, axes, out=None):
        return self._with_axes('Unsqueeze', x, axes, out)

    def _with_axes(self, op, x, axes, out, **attrs):
        """``op`` over ``axes``, given as an input or an attribute as the
        opset asks (axes_are_input)."""
        if axes_are_input(op, self.opset):
            return self.node(op, [x, self.int64s(axes)], self._out(out), **attrs)
        return self.node(op, [x], self._out(out), axes=list(axes), **attrs)

    def reduce(self, op, x, axes=None, keepdims=True, out=None):
        """Reduce ``x`` with ReduceSum/ReduceMean/...; ``axes`` None means all."""
        keep = int(bool(keepdims))
        if axes is None:
            return self.node(op, [x], self._out(out), keepdims=keep)
        return self._with_axes(op, x, axes, out, keepdims=keep)

    def split(self, x, sizes, axis, outputs):
        """Split ``x`` along ``axis`` into pieces of ``sizes`` named ``outputs``."""
        if self.opset >= 13:
            return self.node('Split', [x, self.int64s(sizes)], list(outputs), axis=axis)
        return self.node('Split', [x], list(outputs), axis=axis, split=list(sizes))

    def reshape(self, x, shape, out=None):
        return self.node('Reshape', [x, self.int64s(shape)], self._out(out))

    def slice(self, x, starts, ends, axes, steps=None, out=None):
        inputs = [x, self.int64s(starts), self.int64s(ends), self.int64s(axes)]
        if steps is not None:
            inputs.append(self.int64s(steps))
        return self.node('Slice', inputs, self._out(out))

    def clip(self, x, low, high, dtype, out=None):
        """Clip to [low, high]; either may be None."""
        lo = '' if low is None else self.constant(numpy.asarray(low, dtype=dtype), hint='min')
        hi = '' if high is None else self.constant(numpy.asarray(high, dtype=dtype), hint='max')
        inputs = [x, lo, hi]
        while inputs[-1] == '':
            inputs.pop()
        return self.node('Clip', inputs, self._out(out))

    def dropout(self, x, ratio, training, out=None, seed=None):
        """Dropout; at opset 11 the ratio is an attribute and there is no
        training switch (training-mode dropout needs opset >= 12)."""
        if self.opset >= 12:
            inputs = [x, self.constant(numpy.float32(ratio), hint='ratio')]
            if training:
                inputs.append(self.constant(numpy.bool_(True), hint='training_mode'))
            return self.node('Dropout', inputs, self._out(out), seed=seed)
        if training:
            raise ValueError('a training-mode Dropout needs opset 12 or newer')
        return self.node('Dropout', [x], self._out(out), ratio=float(ratio))

    def batch_normalization_training(self, inputs, outputs, epsilon, momentum,
                                     unbiased_count=None, stat_dtype=None, **attrs):
        """BatchNormalization normalising with the batch statistics, in the
        opset's training form (opset_rules.batch_norm_training_form:
        ``training_mode=1`` from opset 14, five outputs before; the kernels
        and the gradient rule read it with batch_norm_trains).  ``inputs``:
        X, scale, B, running mean, running variance; ``outputs``: names for
        Y, the new running mean and the new running variance (None: not
        needed).  ``attrs`` go to the node (``spatial`` of old opsets).

        ONNX updates the running variance with the batch's population
        variance; Chainer with the unbiased one (times adjust = n / (n - 1),
        n values per channel).  ``unbiased_count`` n asks for Chainer's:
        ONNX's v' = m v + (1 - m) var becomes
        m v + (1 - m) adjust var = adjust v' - (adjust - 1) m v, computed
        in ``stat_dtype``, the running variance's dtype.  Returns the
        output names."""
        outputs = [o or self.fresh('unused') for o in outputs]
        y, new_mean, new_var = outputs
        adjust = None if unbiased_count is None else unbiased_count / max(unbiased_count - 1, 1)
        if adjust is not None and adjust != 1:
            new_var = self.fresh('population_var')
        form, n_outputs = batch_norm_training_form(self.opset)
        node_outputs = [y, new_mean, new_var]
        node_outputs += [self.fresh('saved_' + s) for s in ('mean', 'var')[:n_outputs - 3]]
        self.node('BatchNormalization', inputs, node_outputs, epsilon=float(epsilon),
                  momentum=float(momentum), **form, **attrs)
        if new_var != outputs[2]:
            scaled = self.node('Mul', [new_var, self.constant(adjust, stat_dtype,
                                                              hint='adjust')])
            carried = self.node('Mul', [inputs[4], self.constant(
                (adjust - 1) * momentum, stat_dtype, hint='decay_adjust')])
            self.node('Sub', [scaled, carried], [outputs[2]])
        return outputs

    # -- finishing ------------------------------------------------------------
    def make_model(self, name, inputs, outputs):
        """A ModelProto of everything added, with the lowest IR version the
        opset allows (onnxruntime accepts up to 13)."""
        self._demand([value.name for value in outputs])
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        opset = helper.make_opsetid('', self.opset)
        model = helper.make_model(graph, opset_imports=[opset], producer_name='chainer-compiler')
        model.ir_version = helper.find_min_ir_version_for([opset])
        return model


def value_info(name, array):
    """A tensor ValueInfoProto for ``array``'s dtype and shape."""
    elem = helper.np_dtype_to_tensor_dtype(numpy.dtype(array.dtype))
    return helper.make_tensor_value_info(name, elem, list(array.shape))

