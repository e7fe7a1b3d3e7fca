"""The kernel registry: one entry per (domain, operator, opset-version range).

A kernel is a plain function ``fn(xp, *inputs, **attributes)`` where ``xp`` is
the array module of the backend (numpy or cupy) and the keyword arguments are
the ONNX attributes of the node, under their ONNX names: inputs are positional
parameters, attributes keyword-only ones (after ``*``), and an attribute's
default tells what kind of value it takes (``KernelSpec.attribute_types``).
It returns one array for a single-output operator and a tuple for several.
Omitted optional inputs arrive as ``None``.  A kernel that needs to know how
many outputs the node asks for declares a keyword-only parameter ``n_outputs``.

Operators whose meaning changed between opsets register one kernel per range of
*schema versions* (the ``since_version`` ONNX resolves for the model's opset).
"""
import inspect
import numbers
from dataclasses import dataclass, field
from typing import Callable

from ..errors import UnsupportedOperatorError

#: Schema versions are small integers; this bound means "every later version".
LATEST = 10**6

#: Custom operators of this project (gradient-only kernels and the like).
CUSTOM_DOMAIN = 'org.chainer_compiler'


def normalize_domain(domain):
    """ONNX spells the default domain both '' and 'ai.onnx'; we use ''."""
    return '' if domain in ('', 'ai.onnx') else domain


@dataclass(frozen=True)
class KernelSpec:
    """A registered kernel and what the binder needs to know about it."""
    op: str
    domain: str
    versions: tuple
    fn: Callable
    family: str
    accepts_n_outputs: bool
    attribute_names: frozenset  # None when the kernel takes **kwargs
    #: {attribute: the type(s) its value must have}; ``object`` where any will do.
    attribute_types: dict = field(default_factory=dict, compare=False)

    def accepts(self, version):
        return self.versions[0] <= version <= self.versions[1]


_KERNELS = {}


def kernel(op, *, domain='', versions=(1, LATEST)):
    """Decorator registering ``fn`` as the kernel of ``op``.

    ``versions`` is an inclusive range of ONNX schema versions.
    """
    domain = normalize_domain(domain)

    def register(fn):
        params = inspect.signature(fn).parameters.values()
        # Inputs arrive positionally, so only keyword-only parameters are attributes.
        attributes = {p.name: _attribute_type(p.default) for p in params
                      if p.kind == p.KEYWORD_ONLY and p.name != 'n_outputs'}
        takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in params)
        spec = KernelSpec(op=op, domain=domain, versions=tuple(versions), fn=fn,
                          family=fn.__module__.rsplit('.', 1)[-1],
                          accepts_n_outputs=any(p.name == 'n_outputs' for p in params),
                          attribute_names=None if takes_kwargs else frozenset(attributes),
                          attribute_types=attributes)
        entries = _KERNELS.setdefault((domain, op), [])
        for other in entries:
            if not (spec.versions[1] < other.versions[0] or other.versions[1] < spec.versions[0]):
                raise ValueError('kernel %s registered twice for overlapping versions %s and %s'
                                 % (op, other.versions, spec.versions))
        entries.append(spec)
        return fn

    return register


#: (type of an attribute's default, the type(s) its values must have).
_DEFAULT_TYPES = ((int, numbers.Integral), (float, numbers.Real), (str, str),
                  ((tuple, list), (list, tuple)))


def _attribute_type(default):
    """The type(s) an attribute's value must have, read off its default: an
    int default asks for an integer, a float for a number, a str for a str, a
    tuple for a list.  Without a default, or with None, any value will do."""
    for kind, accepted in _DEFAULT_TYPES:
        if isinstance(default, kind):
            return accepted
    return object


def lookup(op, domain='', version=LATEST, node_name=''):
    """Return the KernelSpec for ``op`` at schema ``version`` or raise
    UnsupportedOperatorError naming the operator."""
    _load_all_families()
    for spec in _KERNELS.get((normalize_domain(domain), op), ()):
        if spec.accepts(version):
            return spec
    raise UnsupportedOperatorError(op, normalize_domain(domain), version, node_name)


def has_kernel(op, domain='', version=LATEST):
    _load_all_families()
    return any(s.accepts(version) for s in _KERNELS.get((normalize_domain(domain), op), ()))


def registered_kernels():
    """Every KernelSpec, sorted by domain, operator and version."""
    _load_all_families()
    return sorted((s for specs in _KERNELS.values() for s in specs),
                  key=lambda s: (s.domain, s.op, s.versions))


_loaded = False


def _load_all_families():
    # Importing a family module registers its kernels; done once, lazily, so
    # that importing the registry itself stays cheap and cycle-free.
    global _loaded
    if not _loaded:
        _loaded = True
        from . import FAMILIES  # noqa: F401  (import for its side effect)
