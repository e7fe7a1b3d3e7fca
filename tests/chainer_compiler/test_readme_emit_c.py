"""README.md's emit-c walk-through, run as written: the docs cannot rot."""
import os
import re
import subprocess
import sys

import numpy
import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..'))
HEADING = '## Python-free deployment'


def walk_through():
    """The commands of the first ```sh block under HEADING, comments dropped."""
    with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
        text = f.read()
    block = re.search(r'```sh\n(.*?)```', text[text.index(HEADING):], re.S).group(1)
    return [line.split('  #')[0].strip() for line in block.splitlines() if line.strip()]


def test_the_walk_through_makes_every_file_it_reads():
    commands = walk_through()
    run = next(c for c in commands if c.startswith('mnist_c/mnist '))
    made = commands[:commands.index(run)]
    assert any('input_0.npy' in c for c in made)  # was read, never made


@pytest.mark.slow
def test_the_readme_emit_c_commands_run_as_written(tmp_path):
    os.symlink(os.path.join(ROOT, 'examples'), tmp_path / 'examples')
    bin_dir = os.path.dirname(sys.executable)
    if not os.path.exists(os.path.join(bin_dir, 'chainer-compiler')):
        pytest.skip('chainer-compiler is not installed next to %s' % sys.executable)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ['PATH'])
    for command in walk_through():
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, (command, done.stderr[-2000:])
    with numpy.load(tmp_path / 'expected.npz', allow_pickle=False) as expected:
        numpy.testing.assert_allclose(numpy.load(tmp_path / 'out' / 'output_0.npy'),
                                      expected['output_0'], rtol=1e-4, atol=1e-4)
