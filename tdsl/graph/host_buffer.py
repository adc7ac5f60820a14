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
kernels' own views stay bound across calls.

`OutputBuffers` is the memory of run states' outputs, which they lend the caller
(runstate.py), for the static executor's states (one each, runstate.make_state) and the
slots of one with symbolic sizes (sizes.Slot) alike: a caller who still holds an output
when the states run again keeps that memory, and the states move to another buffer, one
left before whose arrays the caller has dropped since (its pages touched already), else
a new one, keeping their kernels' bindings to each buffer (RunState.relocate). A
server's loop, which holds its last output while the next call runs, so alternates
between two buffers, binding no kernel again and faulting no fresh page in.
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


def aligned(array: np.ndarray, align: int) -> np.ndarray:
    """`array` where its data starts on a multiple of `align` bytes, else a C-contiguous
    copy that does. A kernel streaming weights whose start is not line-aligned loads most
    vectors across two cache lines: a dense layer at one token, which reads its weights
    once, is bound by those loads, and a network's speed varied from one build to the
    next with where the allocator happened to put each layer's weights."""
    if array.ctypes.data % align == 0 and array.flags.c_contiguous:
        return array
    out = _lines(array.shape, array.dtype, align, np.empty)
    np.copyto(out, array)
    return out


def _lines(shape, dtype, align, alloc) -> np.ndarray:
    """An array of `shape` and `dtype` from `alloc` (np.empty, np.zeros) whose data starts
    on a multiple of `align` bytes."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = alloc(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def align_constant(const, align: int) -> np.ndarray:
    """The data of graph constant `const` as a host kernel reads it: C-contiguous and
    starting on a multiple of `align` bytes (`aligned`). An unaligned one is replaced in
    the constant itself by its aligned copy (the same values, read-only), so that the
    views the arena makes of it (a slice of a position table) start there too, a second
    build finds it aligned, and the unaligned array is freed where nothing else holds it:
    an embedding table is tens of MB, which a copy kept beside it would double. ONNX's
    initializers are views of the protobuf's bytes, 16-48 bytes past a line."""
    data = const.data
    if data.ctypes.data % align or not data.flags.c_contiguous:
        data = aligned(data, align)
        data.setflags(write=False)
        const.data = data
    return data


def zeros_aligned(shape, dtype, align: int) -> np.ndarray:
    """A zeroed array of `shape` and `dtype` whose data starts on a multiple of `align`
    bytes (numpy's own start 16 bytes past one, or 16 past a page when large)."""
    return _lines(shape, dtype, align, np.zeros)


# the most buffers kept that callers still hold (each is reused once they drop it): a
# loop holding its last outputs needs one
MAX_LEFT = 4


class OutputBuffers:
    """The buffer run states write their outputs to (`current`), and those left while a
    caller held arrays in them, the oldest first."""

    def __init__(self, nbytes: int = 0):
        self.current = GrowingBuffer()
        self._left: list = []
        if nbytes:
            self.current.grow(nbytes)

    @property
    def array(self):
        return self.current.array

    @property
    def nbytes(self) -> int:
        return self.current.nbytes

    def grow(self, nbytes: int):
        """The current buffer at `nbytes` or more (the states viewing it dropped first)."""
        return self.current.grow(nbytes)

    def reserve_spare(self, touch=False):
        """A buffer as large as the current one, besides it (a left one no array views,
        else a new one), for the call that runs while the caller holds the last outputs;
        faulted in with `touch`."""
        spare = next((b for b in self._left if not b.in_use()), None)
        if spare is None:
            spare = GrowingBuffer()
            self._left.append(spare)
        if spare.nbytes < self.current.nbytes:
            spare.grow(self.current.nbytes)
            if touch:
                spare.array.fill(0)

    def arrays(self) -> list:
        """The `array` of every buffer kept: those a state's outputs may lie in."""
        return [b.array for b in self._left] + [self.current.array]

    def leave(self, forget=None) -> bool:
        """Whether the caller still holds an array lent from the current buffer: that
        buffer is then left to the caller and another becomes current (the first left
        one no array views any more, else a new one), for the states to move their
        outputs to, at the same offsets (RunState.relocate). Left buffers found free
        beyond the one taken are released, and at most `MAX_LEFT` are kept (an older
        one is then the caller's alone): memory follows what the caller holds, not the
        number of calls. `forget(array)` is told of the array of each buffer no longer
        kept, and of the taken one's when it is about to grow (views of it, states in
        it, would keep it from growing in place): whoever keeps states in the buffers
        drops those (sizes.Slot) here, not by a scan of its states at every call."""
        old = self.current
        if not old.in_use():
            return False
        free = [b for b in self._left if not b.in_use()]
        new = free[0] if free else GrowingBuffer()
        kept = [b for b in self._left if b not in free][-(MAX_LEFT - 1):] + [old]
        if forget is not None:
            for b in self._left:
                if b is not new and b not in kept:
                    forget(b.array)
        self._left = kept
        if new.nbytes < old.nbytes:
            if forget is not None and new.array is not None:
                forget(new.array)
            new.grow(old.nbytes)
        self.current = new
        return True
