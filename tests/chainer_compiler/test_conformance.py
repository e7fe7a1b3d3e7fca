"""ONNX's node conformance tests, run through the VM's own kernels, one
pytest case per node test so that a failure names it.

Every test listed in conformance_passing.txt must pass (a regression list,
regenerated with ``python -m tests.chainer_compiler.update_conformance``);
the others are reported as expected failures with their reason.
"""
import os

import numpy
import pytest

from chainer_compiler.conformance import node_test_names, run_node_test

#: The project's target: at least this many node tests pass.
TARGET = 1000
PASSING_LIST = os.path.join(os.path.dirname(__file__), 'conformance_passing.txt')
PASSING = frozenset(line.strip() for line in open(PASSING_LIST) if line.strip())
NAMES = node_test_names()


def test_the_suite_is_complete_and_the_listed_tests_meet_the_target():
    assert len(NAMES) == 1765
    assert PASSING <= set(NAMES), sorted(PASSING - set(NAMES))
    assert len(PASSING) >= TARGET


@pytest.mark.parametrize('name', NAMES)
def test_node(name):
    with numpy.errstate(all='ignore'):  # many tests divide by zero on purpose
        result = run_node_test(name)
    if name in PASSING:
        assert result.status == 'passed', result.reason
    elif result.status == 'unsupported':
        assert 'operators the VM does not support' in result.reason
        pytest.xfail(result.reason)
    elif result.status == 'failed':
        pytest.xfail(result.reason)
