"""compile_onnx's ``pack_parameters``: a model's Parameters as views into
one flat Parameter, so that a Chainer optimizer updates one array per step
instead of one per Parameter.

Chainer's optimizers pay Python overhead per Parameter (Adam about 50 µs
on the CPU, whatever the size); on a small model that is most of a
compile_onnx step (benchmarks/compile_onnx_floor.py).  Packing trades the
per-Parameter view of the optimizer for that time: the optimizer, its
hooks and its snapshots see one Parameter, while the model's own
Parameters keep their paths, shapes and arrays (views into the flat one),
so the model's serializers and snapshots are unchanged.
"""
import chainer
import numpy


class ParameterPack:
    """One flat Parameter holding ``params`` (name -> Parameter, in order),
    whose arrays become views into it.  The Parameters must be NumPy
    arrays of one floating dtype (the native and NumPy backends)."""

    def __init__(self, params):
        if not params:
            raise ValueError('pack_parameters: the model has no parameters to pack')
        arrays = {name: p.array for name, p in params.items()}
        not_numpy = [name for name, a in arrays.items() if type(a) is not numpy.ndarray]
        if not_numpy:
            raise ValueError('pack_parameters needs NumPy parameters; %s are %s'
                             % (', '.join(not_numpy), type(arrays[not_numpy[0]]).__name__))
        dtypes = sorted({str(a.dtype) for a in arrays.values()})
        if len(dtypes) != 1 or numpy.dtype(dtypes[0]).kind != 'f':
            raise ValueError('pack_parameters needs parameters of one floating dtype, got %s'
                             % ', '.join(dtypes))
        self.names = list(params)
        self.shapes = [a.shape for a in arrays.values()]
        self.sizes = [a.size for a in arrays.values()]
        flat = numpy.empty(sum(self.sizes), dtype=dtypes[0])
        self.views = list(self._views_of(flat))
        for param, view in zip(params.values(), self.views):
            view[...] = param.array
            # The model's Parameter now reads and writes the flat array.
            param.array = view
        self.parameter = chainer.Parameter(flat)

    def gather(self, grads):
        """The flat gradient from per-parameter gradients (name -> array;
        a name missing or None: zeros)."""
        parts = [grads.get(name) for name in self.names]
        if all(g is not None for g in parts):
            return numpy.concatenate([g.reshape(-1) for g in parts])
        flat = numpy.zeros_like(self.parameter.array)
        for view, g in zip(self._views_of(flat), parts):
            if g is not None:
                view[...] = g
        return flat

    def _views_of(self, flat):
        """``flat`` cut into arrays of the parameters' shapes."""
        start = 0
        for shape, size in zip(self.shapes, self.sizes):
            yield flat[start:start + size].reshape(shape)
            start += size
