"""A NumPy Executor keeps the memory the VM frees in the process
(runtime/host_memory.py): a step that frees and makes large arrays again
does not fault their pages in again, unless the user opts out."""
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from chainer_compiler.runtime import host_memory

# In a fresh process (malloc's thresholds are per process): make a NumPy
# Executor, then free and make three 16 MiB arrays five times, printing the
# page faults of the last four rounds.
SCRIPT = textwrap.dedent('''
    import resource
    import numpy
    from chainer_compiler.runtime import Executor, Instruction, Program, ValueInfo
    Executor(Program(instructions=[Instruction('Relu', (0,), (1,), name='n0')],
                     inputs=[ValueInfo('x', 0)], outputs=[ValueInfo('y', 1)],
                     num_registers=2), backend='numpy')
    faults = []
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        arrays = [numpy.ones(2 ** 22, numpy.float32) for _ in range(3)]
        del arrays
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(sum(faults[1:]))
''')


def _faults_after_the_first_round(**environment):
    env = dict(os.environ, **environment)
    done = subprocess.run([sys.executable, '-c', SCRIPT], env=env, capture_output=True,
                          text=True, check=True)
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != 'glibc',
                    reason='the thresholds are glibc malloc\'s; this C library is %r'
                    % (platform.libc_ver()[0] or 'unknown'))
def test_freed_arrays_are_reused_without_faulting_their_pages_again():
    kept = _faults_after_the_first_round()
    system = _faults_after_the_first_round(**{host_memory.OPT_OUT: '0'})
    # 48 MiB a round: glibc's defaults fault much of it in every round.
    assert system > 1000
    assert kept < system / 20
