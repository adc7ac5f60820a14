"""One timing at a time per machine, however many measuring processes it runs.

Two Dask workers on one host, a `ThreadPoolExecutor`, or `n_parallel=2` all put several
measuring processes on the same cores; a parallel kernel timed while another process
compiles or times runs on fewer cores than it thinks and is misjudged. So measuring
processes share a readers-writer lock on a file in the temp folder: building, the first
run and the reference computation hold it shared (they may overlap each other), timing
holds it exclusively (nothing else measuring on this machine runs meanwhile).

`flock` locks belong to an open file, so each process opens its own (a forked child
reopens rather than sharing its parent's lock), and the kernel drops them when a process
dies: a crashed or killed measuring process never leaves the machine locked. A gate file
in front of the lock gives waiting timers priority over new builds, so a stream of builds
cannot starve them. Where `fcntl` does not exist (Windows) the lock does nothing.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

try:
    import fcntl
except ImportError:       # pragma: no cover - Windows
    fcntl = None


class MachineLock:
    def __init__(self, path=None):
        uid = os.getuid() if hasattr(os, "getuid") else 0
        self.path = path or os.path.join(tempfile.gettempdir(), f"tdsl-measure-{uid}.lock")
        self._pid = None
        self._fds = None

    def _open(self):
        if self._pid != os.getpid():          # new process: own open files, own locks
            self._fds = tuple(os.open(p, os.O_RDWR | os.O_CREAT, 0o666)
                              for p in (self.path + ".gate", self.path))
            self._pid = os.getpid()
        return self._fds

    @contextlib.contextmanager
    def shared(self):
        """Building and checking: other builds may run, no timing does."""
        if fcntl is None:
            yield
            return
        gate, main = self._open()
        fcntl.flock(gate, fcntl.LOCK_EX)      # queue behind a waiting timer
        try:
            fcntl.flock(main, fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(main, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self):
        """Timing: nothing else measuring on this machine runs."""
        if fcntl is None:
            yield
            return
        gate, main = self._open()
        fcntl.flock(gate, fcntl.LOCK_EX)      # new builds wait from now on
        try:
            fcntl.flock(main, fcntl.LOCK_EX)  # ... and running ones finish
            try:
                yield
            finally:
                fcntl.flock(main, fcntl.LOCK_UN)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)


LOCK = MachineLock()
