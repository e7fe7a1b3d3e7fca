"""The ONNX graphs ch2o builds: the main graph and the bodies of its
Loop and If nodes.

A ``Scope`` is a GraphBuilder for one graph.  Every scope of one
translation shares one name space (a body's names never clash with the
main graph's, so a body reads outer values by name, as ONNX allows) and
one list of initializers, in the main graph: constants and parameters are
outer-scope values every body can read.  Converters of the tracing
translator take a Scope as their ``ctx``.
"""
import numpy

from ...onnx_builder import GraphBuilder
from ..onnx_chainer.naming import named_arrays
from .values import Const, MaybeNone, Tensor, TranslationError


class Translation:
    """What all scopes of one translation share: the opset, the model whose
    parameters become initializers, and the names taken so far."""

    def __init__(self, opset, model):
        self.opset = opset
        self.model = model
        self.taken = set()
        self.counter = [0]
        self.initializers = []
        self._arrays = {}  # id(parameter or persistent array) -> NamedArray
        self._scan()
        self._added = {}  # ONNX name of an added array -> its Tensor

    def _scan(self):
        if self.model is not None:
            for a in named_arrays(self.model):
                value = a.value
                self._arrays[id(value.array if a.is_parameter else value)] = a

    def state_name(self, array):
        """The link-path name (``/l1/W``) of ``array`` if it is one of the
        model's parameters or persistent arrays, else None.  (A link
        initialized lazily, ``L.Linear(None, n)``, makes its arrays during
        the translation: they are looked for again.)"""
        if id(array) not in self._arrays:
            self._scan()
        a = self._arrays.get(id(array))
        return None if a is None else a.name

    def add_state(self, root, name, array):
        """The initializer ``name`` holding ``array`` (added once)."""
        if name not in self._added:
            root.initializer(name, numpy.asarray(array))
            self._added[name] = Tensor(name, numpy.asarray(array))
        return self._added[name]

    def added_state_names(self):
        return set(self._added)


class Scope(GraphBuilder):
    """One ONNX graph under construction (the main graph, or a body)."""

    def __init__(self, translation, parent=None):
        super().__init__(translation.opset)
        self.translation = translation
        self.parent = parent
        # Shared with every scope of the translation:
        self._taken = translation.taken
        self.initializers = translation.initializers
        self.value_infos = []  # static types of this graph's Loop and If outputs

    @property
    def root(self):
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def child(self):
        """A new scope for a Loop or If body inside this one."""
        return Scope(self.translation, parent=self)

    def fresh(self, hint):
        counter = self.translation.counter
        while True:
            counter[0] += 1
            name = '%s_%d' % (hint, counter[0])
            if name not in self._taken:
                return self.reserve(name)

    # -- values -------------------------------------------------------------
    def emit(self, op, inputs, example, domain='', **attrs):
        """Add a one-output node reading ``inputs`` (Tensors, or names) and
        return its result as a Tensor whose example is ``example``."""
        names = [v.name if isinstance(v, Tensor) else v for v in inputs]
        out = self.node(op, names, 1, domain=domain, **attrs)
        return Tensor(out, numpy.asarray(example))

    def const_tensor(self, value, dtype=None):
        """A Tensor holding the constant ``value``."""
        array = numpy.asarray(value, dtype=dtype)
        return Tensor(self.constant(array, hint='const'), array)

    def param(self, array):
        """The Tensor of one of the model's parameters or persistent arrays
        (``array`` is the NumPy array), or None when it is neither."""
        name = self.translation.state_name(array)
        if name is None:
            return None
        return self.translation.add_state(self.root, name, array)

    def as_tensor(self, value, site, what='value'):
        """``value`` (a Tensor, a MaybeNone's tensor part, or a constant
        number, bool or array) as a Tensor; anything else is a TranslationError naming ``what``."""
        if isinstance(value, Tensor):
            return value
        if isinstance(value, MaybeNone):
            # where it is None, Python would fail on using it as a tensor
            return value.tensor
        if isinstance(value, Const):
            v = value.value
            if isinstance(v, bool) or isinstance(v, numpy.bool_):
                return self.const_tensor(v, numpy.bool_)
            if isinstance(v, int):
                return self.const_tensor(v, numpy.int64)
            if isinstance(v, float):
                return self.const_tensor(v, numpy.float32)
            if isinstance(v, (numpy.ndarray, numpy.generic)):
                return self.const_tensor(v)
            if v is None:  # the original ch2o's convention: None is False
                return self.const_tensor(False, numpy.bool_)
            if hasattr(v, 'array') and isinstance(v.array, numpy.ndarray):
                param = self.param(v.array)  # a chainer.Parameter / Variable
                return param if param is not None else self.const_tensor(v.array)
        raise TranslationError(site, '%s is %s (%s), not a tensor'
                               % (what, value.kind, _describe(value)))


def _describe(value):
    if isinstance(value, Const):
        return type(value.value).__name__
    return type(value).__name__
