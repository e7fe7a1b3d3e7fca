"""Rewrite conformance_passing.txt with the tests that pass now.

    python -m tests.chainer_compiler.update_conformance
"""
import os

import numpy

from chainer_compiler.conformance import run_conformance

if __name__ == '__main__':
    with numpy.errstate(all='ignore'):
        passing = sorted(r.name for r in run_conformance() if r.status == 'passed')
    path = os.path.join(os.path.dirname(__file__), 'conformance_passing.txt')
    with open(path, 'w') as f:
        f.write('\n'.join(passing) + '\n')
    print('%d passing tests written to %s' % (len(passing), path))
