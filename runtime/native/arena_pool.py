"""The arenas of native calls, shared by every NativeRun of the process.

A compiled model has a forward, a backward and an inference program, each a
NativeRun with its own arena size, and they run one after another: an arena
per instance would keep the forward's idle through backward and every one
of them between steps.  Instead each call borrows a buffer of at least its
program's arena size from POOL for the length of the call (the C takes the
arena as a pointer at every call) and gives it back after.

What the pool keeps between calls: as many buffers as calls ever ran at
once (one for a single-threaded training loop), each as large as the
largest arena it served (a NativeRun built but never called sizes none),
and none larger than the largest arena of a NativeRun still alive.  A
call takes the smallest idle buffer that is large enough; when none is,
it allocates one, which replaces the largest idle
buffer that is too small (or adds one when none is idle: concurrent calls
never share a buffer).  When a NativeRun is gone, the idle buffers larger
than every live one's arena go (all of them with the last);
release_arenas() drops them all.
"""
import collections
import contextlib
import os
import threading

import numpy

from ..errors import KernelError
from .arena import aligned_array


def allocate(nbytes: int, program: str) -> numpy.ndarray:
    """A new arena of ``nbytes`` for program ``program``.  Raises KernelError
    naming its size, before allocating, when it is larger than this
    machine's memory (a Program's shapes can ask for any size), or when it
    cannot be allocated."""
    memory = None
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not POSIX
        memory = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    error = KernelError('program %s: the native arena of %d bytes (%.3g GiB) cannot be '
                        'allocated%s' % (program, nbytes, nbytes / 2**30,
                                         '' if memory is None else ' (this machine has '
                                         '%.3g GiB of memory)' % (memory / 2**30)))
    if memory is not None and nbytes > memory:
        raise error
    try:
        # At a cache line, as the arena's offsets (numpy's: 16 bytes past one).
        return aligned_array(nbytes, numpy.empty)
    except MemoryError:
        raise error from None


class ArenaPool:
    """Arena buffers lent to native calls (see the module's docstring).
    An entry is (size in bytes, address, the buffer)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: list[tuple[int, int, numpy.ndarray]] = []
        #: The arena sizes of the users (live NativeRuns), and the largest.
        self._users: collections.Counter[int] = collections.Counter()
        self._limit = 0

    def borrow(self, nbytes: int, program: str) -> tuple[int, int, numpy.ndarray]:
        """An entry no other call holds, of at least ``nbytes``, for program
        ``program``'s call; give it back with give_back.  Raises KernelError
        (allocate) when a new one is needed and cannot be had; the pool is
        then as it was."""
        with self._lock:
            best = -1
            for k, entry in enumerate(self._idle):
                if entry[0] >= nbytes and (best < 0 or entry[0] < self._idle[best][0]):
                    best = k
            if best >= 0:
                return self._idle.pop(best)
        buffer = allocate(nbytes, program)
        with self._lock:
            smaller = [k for k, entry in enumerate(self._idle) if entry[0] < nbytes]
            if smaller:  # replaced by the new one: the count of buffers stays
                del self._idle[max(smaller, key=lambda k: self._idle[k][0])]
        return nbytes, buffer.ctypes.data, buffer

    def check(self, nbytes: int, program: str) -> None:
        """Raise KernelError (allocate) unless an arena of ``nbytes`` for
        program ``program`` can be had: an idle buffer is large enough, or
        one can be allocated, which is then let go.  Only calls size the
        buffers kept: a model's inference program, whose arena is larger
        than its training programs', does not size the buffer its training
        steps hold until an evaluation runs."""
        with self._lock:
            if any(entry[0] >= nbytes for entry in self._idle):
                return
        allocate(nbytes, program)

    def give_back(self, entry: tuple[int, int, numpy.ndarray]) -> None:
        """Make a borrowed ``entry`` idle again, unless it is larger than
        every user's arena (its user is gone)."""
        with self._lock:
            if entry[0] <= self._limit:
                self._idle.append(entry)

    def join(self, nbytes: int) -> None:
        """One more user (a NativeRun) whose arena is ``nbytes``: buffers up
        to that size are kept while it lives."""
        with self._lock:
            self._users[nbytes] += 1
            self._limit = max(self._limit, nbytes)

    def leave(self, nbytes: int) -> None:
        """The user that joined with ``nbytes`` is gone: the idle buffers
        larger than every remaining user's arena go."""
        with self._lock:
            self._users[nbytes] -= 1
            if not self._users[nbytes]:
                del self._users[nbytes]
            self._limit = max(self._users, default=0)
            self._idle = [entry for entry in self._idle if entry[0] <= self._limit]

    def release(self) -> None:
        """Drop the idle buffers (those lent now are kept when given back)."""
        with self._lock:
            self._idle.clear()

    def idle_bytes(self) -> list[int]:
        """The sizes of the idle buffers, largest first."""
        with self._lock:
            return sorted((entry[0] for entry in self._idle), reverse=True)


#: The process's pool, which every NativeRun borrows from.
POOL = ArenaPool()


def release_arenas() -> None:
    """Give the native backend's idle arenas back to the allocator: the
    pool otherwise keeps them while a NativeRun (a native Executor, a
    compiled model on the native backend) lives, so that the next call
    does not allocate and fault its arena in again.  The next call
    allocates what it needs."""
    POOL.release()
