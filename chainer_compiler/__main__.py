"""``python -m chainer_compiler`` is the ``chainer-compiler`` command."""
import sys

from .cli import main

sys.exit(main())
