import os

from chainer_compiler.operators_doc import DOCS, native_page, operators_page

REGENERATE = 'regenerate: python -m chainer_compiler.operators_doc'


def test_operators_page_is_up_to_date():
    assert open(os.path.join(DOCS, 'operators.md')).read() == operators_page(), REGENERATE


def test_native_coverage_section_is_up_to_date():
    text = open(os.path.join(DOCS, 'native.md')).read()
    assert native_page(text) == text, REGENERATE


def test_every_lowered_operator_is_in_the_native_page():
    rows = [line for line in operators_page().splitlines() if line.startswith('| ')]
    lowered = [row.split(' | ')[0][2:] for row in rows if row.split(' | ')[5] == 'yes']
    text = open(os.path.join(DOCS, 'native.md')).read()
    assert len(lowered) > 100 and all(op in text for op in lowered)
