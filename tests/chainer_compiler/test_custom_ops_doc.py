import os

from chainer_compiler.custom_ops_doc import markdown

DOC = os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'custom_domain.md')


def test_custom_domain_page_is_up_to_date():
    assert open(DOC).read() == markdown(), (
        'regenerate: python -m chainer_compiler.custom_ops_doc > docs/custom_domain.md')


def test_every_custom_operator_says_what_it_computes():
    rows = [line for line in markdown().splitlines() if line.startswith('| `')]
    assert len(rows) >= 20
    assert all(not line.endswith('|  |') for line in rows)
