"""Writing output files so that a failure never leaves half a file."""
import contextlib
import errno
import os
import secrets
import sys


@contextlib.contextmanager
def atomic_write(path, mode='wb', sync=True):
    """Open a file object for writing ``path`` (``mode`` 'wb' or 'w', the
    latter UTF-8 text); the file appears at ``path`` only when the block ends
    without an error.  ``sync=False`` skips the fsync, for files that are
    cheap to write again (emitted sources).

    The data goes to a new temporary file in the same directory, which then
    replaces ``path`` in one step (os.replace), so readers see the old file
    or the new one, never a part.  On an error the temporary file is removed
    and ``path`` is left as it was.  A ``path`` that is a directory raises
    IsADirectoryError naming it.
    """
    if mode not in ('wb', 'w'):
        raise ValueError("atomic_write writes with mode 'wb' or 'w', not %r" % (mode,))
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, 'is a directory, not a file', path)
    folder, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(folder, '.%s.%s.tmp' % (name, secrets.token_hex(4)))
    # O_EXCL: never write through a file or link someone put there; mode
    # 0o666 lets the umask decide permissions, as open() would.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(fd, mode, encoding=None if 'b' in mode else 'utf-8') as f:
            yield f
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def same_file(a, b):
    """Whether paths ``a`` and ``b`` name one file: equal once symbolic
    links are resolved, or hard links to one file."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


#: The exit status of a command whose stdout reader went away (``| head``):
#: that of a process SIGPIPE ended (128 + 13), as for other Unix tools.
EXIT_BROKEN_PIPE = 141


def end_on_closed_stdout():
    """After a BrokenPipeError writing stdout: point stdout at os.devnull,
    so that Python's flush at exit does not fail (and print) again; return
    EXIT_BROKEN_PIPE for the command to exit with, saying nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (replaced, as tests do)
        pass
    return EXIT_BROKEN_PIPE
