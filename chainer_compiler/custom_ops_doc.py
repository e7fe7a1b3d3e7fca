"""The reference page of this project's ONNX domain, generated from the
kernel registry.

    python -m chainer_compiler.custom_ops_doc > docs/custom_domain.md
"""
from .runtime.ops import CUSTOM_DOMAIN, registered_kernels


def markdown():
    lines = [
        '# The `%s` operator domain' % CUSTOM_DOMAIN,
        '',
        'Generated from the kernel registry by `python -m chainer_compiler.custom_ops_doc`;',
        'do not edit.',
        '',
        'Operators the compiler emits that standard ONNX lacks: training-mode forms of',
        'Chainer functions (`compile_onnx` rewrites inference-mode exports into them) and',
        'gradient-only kernels the backward programs use. Version 1; attributes and inputs',
        'as each kernel documents. Exported model files never contain them; the compiled',
        'forward/backward graphs and training-step graphs (`dump_onnx`) do.',
        '',
        '| operator | family | what it computes |',
        '|---|---|---|',
    ]
    for spec in registered_kernels():
        if spec.domain != CUSTOM_DOMAIN:
            continue
        summary = ' '.join((spec.fn.__doc__ or '').strip().split('\n\n')[0].split())
        lines.append('| `%s` | %s | %s |' % (spec.op, spec.family, summary.replace('|', '\\|')))
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    print(markdown(), end='')
