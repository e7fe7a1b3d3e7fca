"""ONNX's node conformance tests, run through the VM's own kernels.

Every test listed in conformance_passing.txt must keep passing (a regression
list, regenerated with ``python -m tests.chainer_compiler.update_conformance``),
and the total must stay at or above the project's target.
"""
import os

import numpy
import pytest

from chainer_compiler.conformance import run_conformance, summarize

TARGET = 1000
PASSING_LIST = os.path.join(os.path.dirname(__file__), 'conformance_passing.txt')


@pytest.fixture(scope='module')
def results():
    with numpy.errstate(all='ignore'):  # many tests divide by zero on purpose
        return run_conformance()


def test_at_least_the_target_passes(results):
    totals, _ = summarize(results)
    assert totals['total'] == 1765
    assert totals['passed'] >= TARGET, totals


def test_no_listed_test_regresses(results):
    expected = [line.strip() for line in open(PASSING_LIST) if line.strip()]
    status = {r.name: r for r in results}
    regressed = ['%s: %s %s' % (n, status[n].status, status[n].reason)
                 for n in expected if status[n].status != 'passed']
    assert regressed == []


def test_unsupported_tests_name_their_operators(results):
    for r in results:
        if r.status == 'unsupported':
            assert 'operators the VM does not support' in r.reason
