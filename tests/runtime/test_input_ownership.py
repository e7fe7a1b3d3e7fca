"""Executor.run_positional(consume=True): the run owns its inputs and frees
each at its last read, so the process holds what the Program's frees say."""
import tracemalloc

import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime import Executor

N = 2 ** 20  # floats: 4 MiB a value, far above anything else the run allocates


def _chain():
    """x -> Neg -> a -> Neg -> b -> Neg -> y: x is dead after the first node."""
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [N]) for n in ('x', 'y')]
    nodes = [helper.make_node('Neg', [i], [o]) for i, o in (('x', 'a'), ('a', 'b'), ('b', 'y'))]
    graph = helper.make_graph(nodes, 'chain', info[:1], info[1:])
    return build_program(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)]))


def _peak_above_start(executor, consume):
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        values = [numpy.ones(N, numpy.float32)]  # the list holds the only reference
        executor.run_positional(values, consume=consume)
        return tracemalloc.get_traced_memory()[1] - start, values
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize('track_memory', [False, True])  # straight-line and step-by-step runs
def test_a_consumed_input_is_freed_at_its_last_read(track_memory):
    executor = Executor(_chain(), backend='numpy', track_memory=track_memory)
    executor.run_positional([numpy.ones(N, numpy.float32)])  # generate the run first
    value = 4 * N
    kept, values = _peak_above_start(executor, consume=False)
    assert len(values) == 1  # the caller's list is left as it was
    consumed, values = _peak_above_start(executor, consume=True)
    assert values == []
    # Kept: x, a and b live at the second Neg; consumed: x is gone after the
    # first, so a and b (then b and y) are the most ever live.
    assert kept >= 3 * value > consumed >= 2 * value


def test_consume_takes_a_list_only():
    executor = Executor(_chain(), backend='numpy')
    with pytest.raises(TypeError, match='takes a list, not tuple'):
        executor.run_positional((numpy.ones(N, numpy.float32),), consume=True)
