"""Host memory that grows in place (`GrowingBuffer`): the arenas of an executor with
symbolic sizes (sizes.Slot), which grow when a call needs more than any before it.

A fresh allocation's pages are faulted in (and zeroed by the kernel) on their first
touch, which at a new largest size can cost more than the run itself (and in a virtual
machine many times more for memory the host has not handed out before). An
anonymous mapping extended with mremap keeps the pages it had, so growing touches only
the bytes added; it is advised for huge pages (one fault per 2 MiB, as numpy asks for its
own large arrays). Views of the buffer must be dropped before it grows: one that is
still held (a caller's output) keeps the old mapping alive, and the buffer moves to a
new one instead.

The buffer has two arrays over its memory: `array`, of which the executor makes the
views its kernels write, and `public`, of which it makes the views it hands to callers
(`lend`). A view of a view holds the array it was first made of (numpy keeps the first
array that owns no data as the base), so `in_use` reads from `public`'s reference count
alone whether a caller still holds any view of the memory (an output, a slice of one),
whatever views the executor itself keeps: a check of a few nanoseconds, where the
kernels' own views may stay bound across calls.
"""
from __future__ import annotations

import mmap
import sys

import numpy as np

# the size of a huge page: a mapping a whole number of them long is placed on their
# boundary, so that every page of it can be a huge one
HUGE_PAGE = 2 << 20


class GrowingBuffer:
    """A uint8 host buffer (`array`, None until the first `grow`)."""

    def __init__(self):
        self._map = None
        self.array = None
        self.public = None
        self.nbytes = 0

    def grow(self, nbytes: int) -> np.ndarray:
        """The buffer at `nbytes` or more, its contents kept; the caller has dropped every
        view of the old `array` (a view still held makes this a new mapping)."""
        if nbytes <= self.nbytes:
            return self.array
        if nbytes >= HUGE_PAGE // 8:
            nbytes = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
        self.array = self.public = None
        if self._map is not None:
            try:
                self._map.resize(nbytes)
            except (BufferError, OSError, ValueError, SystemError):
                # views still hold the old mapping (they keep it alive) or mremap is missing
                self._map = None
        if self._map is None:
            self._map = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            advise = getattr(mmap, "MADV_HUGEPAGE", None)
            if advise is not None:
                try:
                    self._map.madvise(advise)
                except OSError:      # a kernel without transparent huge pages
                    pass
        self.array = np.frombuffer(self._map, np.uint8)
        self.public = np.frombuffer(self._map, np.uint8)
        self.nbytes = nbytes
        return self.array

    def in_use(self) -> bool:
        """Whether a caller still holds an array of this buffer that `lend` made (or a
        view of one): beyond the reference of `public` itself (and getrefcount's own)."""
        return self.public is not None and sys.getrefcount(self.public) > 2

    def lend(self, offset: int, shape, dtype) -> np.ndarray:
        """An array of `shape` and `dtype` at byte `offset` of the buffer for a caller:
        `in_use` sees it (and every view of it) while it lives."""
        return np.ndarray(shape, dtype, self.public, offset)

    def holds(self, a) -> bool:
        """Whether numpy array `a` lies in this buffer's memory."""
        return self.array is not None and isinstance(a, np.ndarray) and np.may_share_memory(a, self.array)
