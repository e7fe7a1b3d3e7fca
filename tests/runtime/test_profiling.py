import json

import numpy
import pytest

from chainer_compiler import build_program
from chainer_compiler.runtime import Executor, Instruction, Program, Tracer, ValueInfo

X = numpy.ones((2, 3), numpy.float32)


def test_tracing_many_runs_keeps_bounded_events_and_exact_totals(tmp_path, mlp_model):
    tracer = Tracer(max_events=10)
    executor = Executor(build_program(mlp_model), tracer=tracer)
    for _ in range(2000):
        executor.run({'x': X})
    assert len(tracer.events) == 10  # was 6000: every event, kept forever
    assert sorted((name, n) for name, n, _ in tracer.summary()) == [
        ('MatMul', 2000), ('Relu', 2000)]  # the bias Add is MatMul's third input
    path = tmp_path / 'trace.json'
    tracer.write_chrome_tracing(str(path))
    events = json.loads(path.read_text())['traceEvents']
    assert events == list(tracer.events)
    assert [e['name'] for e in events[-2:]] == ['MatMul', 'Relu']


def test_the_default_keeps_the_latest_100_000_events():
    assert Tracer().events.maxlen == 100_000


def test_summary_counts_events_that_are_not_kept():
    tracer = Tracer(keep_events=False)
    program = Program(instructions=[Instruction('Relu', (0,), (1,), version=14)],
                      inputs=[ValueInfo('x', 0)], outputs=[ValueInfo('y', 1)], num_registers=2)
    Executor(program, tracer=tracer).run({'x': X})
    assert len(tracer.events) == 0
    assert [(name, n) for name, n, _ in tracer.summary()] == [('Relu', 1)]


def test_chrome_tracing_into_a_directory_is_a_clear_error(tmp_path):
    with pytest.raises(IsADirectoryError, match='is a directory'):
        Tracer().write_chrome_tracing(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
