"""The reference page of this project's ONNX domain, generated from the
operators' ONNX schemas (custom_schemas.py, which makes them from the kernel
registry).

    python -m chainer_compiler.custom_ops_doc > docs/custom_domain.md
"""
import numpy
from onnx import defs, helper

from .custom_schemas import register_schemas
from .runtime.ops import CUSTOM_DOMAIN, lookup


def markdown():
    """The page: what each operator computes, then its signature."""
    register_schemas()
    schemas = sorted((s for s in defs.get_all_schemas() if s.domain == CUSTOM_DOMAIN),
                     key=lambda s: s.name)
    lines = [
        '# The `%s` operator domain' % CUSTOM_DOMAIN,
        '',
        "Generated from the operators' ONNX schemas (made from the kernel registry by",
        '`chainer_compiler/custom_schemas.py`) by `python -m chainer_compiler.custom_ops_doc`;',
        'do not edit.',
        '',
        'Operators the compiler emits that standard ONNX lacks: training-mode forms of',
        'Chainer functions (`compile_onnx` rewrites inference-mode exports into them),',
        'gradient-only kernels the backward programs use, the in-place optimizer updates of',
        'compiled training steps and the fused `FusedGemm`. Version 1. Once',
        '`register_schemas()` has run, `onnx.checker` checks their nodes and',
        '`onnx.shape_inference` types their outputs. Exported model files never contain them;',
        'the compiled forward/backward graphs and training-step graphs (`dump_onnx`) do.',
        '',
        '| operator | family | what it computes |',
        '|---|---|---|',
    ]
    for s in schemas:
        summary = ' '.join(s.doc.split('\n\n')[0].split())
        lines.append('| `%s` | %s | %s |' % (s.name, lookup(s.name, CUSTOM_DOMAIN).family,
                                              _cell(summary)))
    lines += [
        '',
        '## Signatures',
        '',
        'Inputs and outputs in order (`?`: optional); attributes by name, with their ONNX type',
        'and default.',
        '',
        '| operator | inputs | outputs | attributes |',
        '|---|---|---|---|',
    ]
    for s in schemas:
        lines.append('| `%s` | %s | %s | %s |' % (
            s.name, _parameters(s.inputs), _parameters(s.outputs),
            ', '.join(_attribute(a) for _, a in sorted(s.attributes.items())) or '—'))
    return '\n'.join(lines) + '\n'


def _cell(text):
    return text.replace('|', '\\|')


def _parameters(params):
    """Formal parameters as a table cell: names, ``?`` for optional ones,
    and their descriptions (such as "updated in place")."""
    optional = defs.OpSchema.FormalParameterOption.Optional
    return ', '.join('`%s`%s%s' % (p.name, '?' if p.option == optional else '',
                                   ' (%s)' % p.description if p.description else '')
                     for p in params)


def _attribute(attribute):
    """An OpSchema.Attribute as "`name`: type = default" (or "(required)")."""
    text = '`%s`: %s' % (attribute.name, attribute.type.name.lower())
    if attribute.required:
        return text + ' (required)'
    if attribute.default_value.name:  # set
        value = helper.get_attribute_value(attribute.default_value)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, float):  # stored as a float32
            value = numpy.float32(value)
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode() for v in value]
        text += ' = %s' % _cell(repr(value) if isinstance(value, (str, list)) else str(value))
    return text


if __name__ == '__main__':
    print(markdown(), end='')
