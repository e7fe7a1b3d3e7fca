"""The names a Chainer model's arrays take in an exported ONNX file.

This is the contract between the exporter and ``compile_onnx``: the
exporter names each initializer that holds a parameter or persistent array
this way, and ``compile_onnx`` binds initializers to the model's arrays by
the same names.  An array is named by its link's path and its attribute,
``/predictor/l1/W`` or ``/bn/avg_mean`` (a root link's own: ``/W``), which
is how Chainer's ``namedparams`` names parameters.  Persistent values that
are not arrays (BatchNormalization's counter ``N``, Python scalars) have no
name: an ONNX initializer is a tensor, and no converter reads them.
"""
from dataclasses import dataclass

import chainer


def array_name(link_path, attribute):
    """The ONNX name of ``attribute`` of the link at ``link_path`` (as
    ``Link.namedlinks`` spells it: '/' for the root, '/predictor/l1')."""
    return '%s/%s' % ('' if link_path == '/' else link_path, attribute)


@dataclass(frozen=True)
class NamedArray:
    """One parameter or persistent array of a model, under its ONNX name."""
    name: str
    link: object          # the chainer.Link that holds it
    attribute: str
    is_parameter: bool

    @property
    def value(self):
        """The chainer.Parameter, or the persistent array."""
        return getattr(self.link, self.attribute)


def named_arrays(model):
    """Every parameter of ``model`` and its links (initialized or not), then
    every persistent array, each under its ONNX name."""
    links = list(model.namedlinks())
    params = [NamedArray(array_name(path, name), link, name, True)
              for path, link in links for name in sorted(link._params)]
    persistents = [NamedArray(array_name(path, name), link, name, False)
                   for path, link in links for name in sorted(link._persistent)
                   if isinstance(getattr(link, name, None), chainer.get_array_types())]
    return params + persistents
