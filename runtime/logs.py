"""Logging for the command lines.

The package logs its long operations (C builds, recompute planning,
compiles, export) under the ``chainer_compiler`` logger, which has a
NullHandler: a library user sees nothing unless they configure logging.
The command lines' ``-v`` (INFO: what is done, how long it took) and
``-vv`` (DEBUG: the details) call configure_logging.
"""
import logging
import sys

LOGGER = 'chainer_compiler'

#: The handler configure_logging installed, replaced by its next call.
_handler: logging.Handler | None = None


def configure_logging(verbosity: int) -> None:
    """Print the ``chainer_compiler`` logger's records on stderr: none of
    its own for ``verbosity`` 0, INFO for 1, DEBUG for 2 or more."""
    global _handler
    logger = logging.getLogger(LOGGER)
    if _handler is not None:
        logger.removeHandler(_handler)
        _handler = None
    logger.setLevel(logging.NOTSET)
    if verbosity > 0:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter('%(name)s: %(message)s'))
        logger.addHandler(_handler)
        logger.setLevel(logging.INFO if verbosity == 1 else logging.DEBUG)
