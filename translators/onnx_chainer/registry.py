"""Converter registry: Chainer FunctionNode class name -> converter.

A converter is ``fn(ctx, call)``: ``ctx`` is the GraphBuilder collecting the
ONNX graph, ``call`` the FunctionCall being translated (the FunctionNode,
ONNX names of its inputs and outputs, the input arrays it saw).  It adds
nodes that read ``call.inputs`` and write every name in ``call.outputs``.
"""

_CONVERTERS = {}


def converter(*function_names):
    """Decorator registering a converter for one or more FunctionNode
    class names (as ``type(node).__name__`` spells them)."""
    def register(fn):
        for name in function_names:
            if name in _CONVERTERS:
                raise ValueError('converter for %s registered twice' % name)
            _CONVERTERS[name] = fn
        return fn
    return register


def lookup(function_name, external=None):
    """The converter for ``function_name`` (external converters first), or
    None."""
    _load_all_families()
    if external and function_name in external:
        return external[function_name]
    return _CONVERTERS.get(function_name)


def supported_functions():
    """{FunctionNode class name: family} for every registered converter."""
    _load_all_families()
    return {name: fn.__module__.rsplit('.', 1)[-1] for name, fn in sorted(_CONVERTERS.items())}


_loaded = False


def _load_all_families():
    global _loaded
    if not _loaded:
        _loaded = True
        from . import FAMILIES  # noqa: F401  (imported for its registrations)
