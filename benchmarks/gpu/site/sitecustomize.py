"""Put on PYTHONPATH by run_gpu_checks.py so that every Python process it
starts (pytest, conformance workers, the tests' own subprocesses) imports
chainer_compiler from the checkout (see ../ccshim.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ccshim  # noqa: E402

ccshim.install()
