"""Write the API reference, HTML generated from the docstrings by pdoc, to
the folder given (``make docs`` writes build/api/).  Any warning of pdoc's
(a name in ``__all__`` that does not resolve, a module that does not
import, a broken cross-reference) is an error.

pdoc rather than Sphinx: the docstrings are plain text and Markdown, and
pdoc renders them with no configuration or .rst sources to keep in step.
"""
import pathlib
import sys
import warnings

import pdoc

import chainer_compiler


def main(output):
    """Write the reference of chainer_compiler and chainer_compiler.runtime."""
    warnings.filterwarnings('error', module='pdoc')
    # The public names load lazily; pdoc finds only those already loaded.
    for name in chainer_compiler.__all__:
        getattr(chainer_compiler, name)
    pdoc.pdoc('chainer_compiler', output_directory=pathlib.Path(output))


if __name__ == '__main__':
    main(sys.argv[1])
