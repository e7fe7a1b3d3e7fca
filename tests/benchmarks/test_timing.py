"""The benchmark's timing: candidates that time themselves in another
process (PyTorch) are interleaved like the others, a PyTorch process
that cannot run says why, and the busy neighbour never outlives its
benchmark."""
import os
import subprocess
import sys
import textwrap
import time

import numpy
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks'))
import models  # noqa: E402
import training_candidates as training  # noqa: E402
from timing import busy_neighbour, time_interleaved  # noqa: E402


class _SelfTimed:
    """Says each call took 2 ms; records the calls asked of it."""

    def __init__(self):
        self.requests, self.clocks = [], []

    def timed_calls(self, n, clock):
        self.requests.append(n)
        self.clocks.append(clock)
        return [0.002] * n


def test_self_timed_candidates_are_asked_round_by_round():
    self_timed, order = _SelfTimed(), []
    ms = time_interleaved({'python': lambda: order.append('python'), 'other': self_timed},
                          budget_s=0.02, rounds=4)
    assert ms['other'] == pytest.approx(2.0)
    # Three warm-up calls, then 10 calls (0.02 s of 2 ms) over 4 rounds.
    assert self_timed.requests == [3, 3, 3, 3, 3]
    assert len(order) == 3 + 4 * 75  # 300 calls at most, spread over the rounds
    assert set(self_timed.clocks) == {'wall'}


def test_cpu_clock_leaves_out_time_the_process_does_not_run():
    # A sleeping call is what a descheduled one looks like: wall time, no CPU time.
    self_timed = _SelfTimed()
    candidates = {'sleep': lambda: time.sleep(0.01), 'other': self_timed}
    wall = time_interleaved(candidates, budget_s=0.0, rounds=1)
    cpu = time_interleaved(candidates, budget_s=0.0, rounds=1, clock='cpu')
    assert wall['sleep'] >= 10
    assert cpu['sleep'] < 5
    assert self_timed.clocks[-1] == 'cpu'  # the other process is asked for its CPU time


def test_pytorch_that_cannot_run_says_why(tmp_path):
    model = models.MLP([4, 3])
    x = numpy.zeros((2, 4), numpy.float32)
    t = numpy.zeros(2, numpy.int32)
    model(x)
    with pytest.raises(RuntimeError, match='no PyTorch environment'):
        training.TorchStep(str(tmp_path / 'missing'), {'model': 'MLP'}, model, x, t)
    # This environment has no torch: the script fails on its import.
    with pytest.raises(RuntimeError, match="(?s)failed: .*No module named 'torch'"):
        training.TorchStep(sys.executable, {'model': 'MLP', 'sizes': [4, 3],
                                            'optimizer': 'sgd'}, model, x, t)


@pytest.mark.parametrize('make', ['chainer_step', 'compiled_training_step'])
def test_a_checkpoint_rewinds_the_training_so_every_row_times_the_same_steps(make):
    # Adam's moments of dead units turn subnormal after ~700 steps of one
    # batch and every step then costs more: rows timed later must not see that.
    model = models.MLP([4, 3, 2])
    rng = numpy.random.RandomState(0)
    x = rng.rand(5, 4).astype(numpy.float32)
    t = rng.randint(0, 2, 5).astype(numpy.int32)
    model(x)
    step = getattr(training, make)(model, x, t, 'adam')
    step()
    restore = training.checkpoint(step)
    classifier, optimizer = step.trains

    def three_steps():
        losses = [float(getattr(loss, 'array', loss)) for loss in (step(), step(), step())]
        return losses, [p.array.copy() for p in classifier.params()], optimizer.t

    first = three_steps()
    restore()
    again = three_steps()
    assert first[0] == again[0] and first[2] == again[2] == 4
    for a, b in zip(first[1], again[1]):
        numpy.testing.assert_array_equal(a, b)


def _running(pid):
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        with open('/proc/%d/stat' % pid) as stat:
            return stat.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='reads /proc')
def test_the_busy_neighbour_exits_when_its_benchmark_dies_without_cleaning_up():
    # A benchmark killed by a timeout leaves no spinning process behind to
    # slow every later measurement on the machine.
    script = textwrap.dedent('''
        import os, sys
        sys.path.insert(0, %r)
        from timing import busy_neighbour
        with busy_neighbour() as child:
            print(child.pid, flush=True)
            os._exit(0)  # no finally, no kill: as SIGKILL would leave it
    ''' % os.path.dirname(sys.modules['timing'].__file__))
    pid = int(subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                             check=True, timeout=60).stdout)
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


def test_the_busy_neighbour_spins_only_inside_its_block():
    with busy_neighbour() as child:
        assert child.poll() is None
    assert child.returncode is not None
    with busy_neighbour(False) as nobody:
        assert nobody is None
