import os

from chainer_compiler.translators.onnx_chainer.function_table import (
    ONNX_CHAINER_FUNCTIONS,
    markdown,
)
from chainer_compiler.translators.onnx_chainer.registry import supported_functions

DOC = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'docs', 'supported_functions.md')


def test_docs_table_is_up_to_date():
    assert open(DOC).read() == markdown(), (
        'regenerate: python -m chainer_compiler.translators.onnx_chainer.function_table '
        '> docs/supported_functions.md')


def test_everything_onnx_chainer_exported_is_supported():
    assert sorted(ONNX_CHAINER_FUNCTIONS - set(supported_functions())) == []
