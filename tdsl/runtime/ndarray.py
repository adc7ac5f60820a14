"""Devices and device arrays: `tdsl.cpu(0)`, `tdsl.cuda(0)`, `tdsl.opencl(0)`,
`tdsl.nd.array(x, device)`, `tdsl.nd.empty(shape, dtype, device)`, `.numpy()`.

GPU runtimes are imported on first use only (pyopencl, pycuda or cuda-bindings), so this
module and `import tdsl` need nothing but numpy. `Device.exist` answers without raising.
"""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..dtype import bfloat16_to_float32, float32_to_bfloat16  # noqa: F401 (tdsl.nd.*)
from ..errors import TdslError

_KINDS = ("cpu", "cuda", "opencl")


class Device:
    """A device: `kind` is "cpu", "cuda" or "opencl", `index` its number."""

    def __init__(self, kind, index=0):
        if kind not in _KINDS:
            raise TdslError(f"unknown device kind {kind!r}; use one of {', '.join(_KINDS)}")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise TdslError(f"device index must be a non-negative int, got {index!r}")
        self.kind = kind
        self.index = index

    device_type = property(lambda self: self.kind)
    device_id = property(lambda self: self.index)

    @property
    def exist(self) -> bool:
        """Whether the device is there (False, never an error, when its runtime or driver
        is missing)."""
        if self.kind == "cpu":
            return self.index == 0
        try:
            if self.kind == "opencl":   # present and able to build a kernel
                from . import opencl
                return opencl.get_device(self.index, probe=True) is not None and \
                    opencl.unusable_reason(self.index) is None
            return self.api(probe=True) is not None
        except TdslError:
            return False

    def api(self, probe=False):
        """The runtime object of this device, None on the CPU (raises TdslError when it
        is not available)."""
        if self.kind == "cuda":
            from . import cuda
            return cuda.get_device(self.index, probe=probe)
        if self.kind == "opencl":
            from . import opencl
            return opencl.get_device(self.index, probe=probe)
        return None

    @property
    def name(self) -> str:
        if self.kind == "cpu":
            return "cpu"
        return self.api().name

    def sync(self):
        api = self.api()
        if api is not None:
            api.sync()

    def counts(self) -> dict:
        """What the runtime did on this device so far: allocations (`allocs`,
        `alloc_bytes`) and copies (`to_device`, `to_host`, `on_device`); compare two
        snapshots."""
        api = self.api()
        if api is None:
            from .devstats import Counts
            return Counts().snapshot()
        return api.counts.snapshot()

    def __eq__(self, other):
        return isinstance(other, Device) and (self.kind, self.index) == (other.kind, other.index)

    def __hash__(self):
        return hash((self.kind, self.index))

    def __repr__(self):
        return f"{self.kind}({self.index})"


def cpu(index=0) -> Device:
    return Device("cpu", index)


def cuda(index=0) -> Device:
    return Device("cuda", index)


def opencl(index=0) -> Device:
    return Device("opencl", index)


gpu = cuda
cl = opencl


class NDArray:
    """An n-d array on a device. On the CPU it wraps a numpy array; on a GPU it owns
    device memory (freed with the object)."""

    def __init__(self, shape, dtype, device, handle=None, host=None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dt.to_numpy(dtype)
        self.device = device
        self.host = host          # the numpy array of a CPU NDArray
        self.handle = handle      # runtime memory object of a GPU NDArray

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def numpy(self, stream=None) -> np.ndarray:
        """A numpy copy of the contents (after the work queued on `stream` before it)."""
        if self.host is not None:
            return self.host.copy()
        out = np.empty(self.shape, self.dtype)
        if out.nbytes:
            self.device.api().copy_out(self.handle, out, stream)
        return out

    def view(self, offset, shape, dtype=None) -> "NDArray":
        """An array over bytes [offset, offset + its size) of this one's memory, no copy
        (an arena slice). OpenCL needs `offset` from the allocation's start to be a
        multiple of the device's `view_alignment`."""
        dtype = dt.to_numpy(dtype or self.dtype)
        out = NDArray(shape, dtype, self.device)
        if offset < 0 or offset + out.nbytes > self.nbytes:
            raise TdslError(f"view: bytes [{offset}, {offset + out.nbytes}) are outside an array "
                            f"of {self.nbytes} bytes")
        if self.host is not None:
            flat = self.host.reshape(-1).view(np.uint8)
            out.host = flat[offset:offset + out.nbytes].view(dtype).reshape(out.shape)
        else:
            out.handle = self.device.api().view(self.handle, offset, out.nbytes)
        return out

    def copyfrom(self, source, stream=None):
        """Copies a numpy array (or another NDArray) of the same shape and dtype in; an
        NDArray on the same GPU is copied on the device."""
        if isinstance(source, NDArray):
            if source.device == self.device and self.host is None:
                if source.shape != self.shape or source.dtype != self.dtype:
                    raise TdslError(f"copyfrom: expected shape {self.shape} and dtype {self.dtype}, "
                                    f"got {source.shape} {source.dtype}")
                if self.nbytes:
                    self.device.api().copy_dd(self.handle, source.handle, self.nbytes, stream)
                return self
            source = source.numpy()
        source = np.require(source, requirements="C")      # 0-d stays 0-d
        if source.shape != self.shape or source.dtype != self.dtype:
            raise TdslError(f"copyfrom: expected shape {self.shape} and dtype {self.dtype}, got "
                            f"{source.shape} {source.dtype}")
        if self.host is not None:
            self.host[...] = source
        elif source.nbytes:
            self.device.api().copy_in(self.handle, source, stream)
        return self

    def tdsl_host_array(self):
        """The CPU module's seam: a CPU NDArray hands over its numpy array."""
        if self.host is not None:
            return self.host
        return None

    def __repr__(self):
        return f"<tdsl.nd.NDArray shape={self.shape} dtype={self.dtype} device={self.device}>"


def empty(shape, dtype="float32", device=None) -> NDArray:
    device = device or cpu(0)
    if isinstance(shape, int):
        shape = (shape,)
    dtype = dt.to_numpy(dtype)
    if device.kind == "cpu":
        return NDArray(shape, dtype, device, host=np.empty(shape, dtype))
    api = device.api()
    arr = NDArray(shape, dtype, device)
    arr.handle = api.alloc(arr.nbytes)
    return arr


def array(source, device=None) -> NDArray:
    """A device array holding a copy of `source` (a numpy array or anything np.asarray
    takes)."""
    if isinstance(source, NDArray):
        source = source.numpy()
    src = np.require(np.asarray(source), requirements="C")      # 0-d stays 0-d
    arr = empty(src.shape, src.dtype, device)
    return arr.copyfrom(src)
