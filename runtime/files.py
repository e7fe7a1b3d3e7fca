"""Writing output files so that a failure never leaves half a file."""
import contextlib
import errno
import os
import secrets


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
