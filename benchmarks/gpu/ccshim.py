"""Import chainer_compiler from a checkout that is not pip-installed.

setup.py maps runtime/ and translators/ into the chainer_compiler
namespace with package_dir; an installed copy (or ``pip install -e .``)
does the same.  On a machine where installing is not an option (no network,
another Python), ``install()`` puts the checkout on sys.path and adds a
finder that resolves ``chainer_compiler.runtime`` and
``chainer_compiler.translators`` to those folders.
"""
import importlib.abc
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_MAPPED = {'chainer_compiler.runtime': 'runtime',
           'chainer_compiler.translators': 'translators'}


class _MappedPackages(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        folder = _MAPPED.get(name)
        if folder is None:
            return None
        folder = os.path.join(ROOT, folder)
        return importlib.util.spec_from_file_location(
            name, os.path.join(folder, '__init__.py'), submodule_search_locations=[folder])


def install():
    """Make ``import chainer_compiler.runtime`` work from this checkout
    (a no-op where chainer_compiler is installed)."""
    try:
        if importlib.util.find_spec('chainer_compiler.runtime') is not None:
            return  # installed (or already shimmed)
    except ImportError:  # chainer_compiler is absent or broken here: shim it
        pass
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    sys.meta_path.insert(0, _MappedPackages())
