"""GPU kernels emulated on the CPU: the runtime for target "c" on schedules that bind
loops to blockIdx/threadIdx. The kernels come from `tdsl.codegen.source.c_gpu` (blocks in
sequence, the threads of a block as fibers switched at barriers) and are compiled by the
system C compiler; memory is host memory. It checks the semantics of GPU schedules (shared memory,
barriers, cross-thread reductions) on any machine; it is not fast."""
from __future__ import annotations

import ctypes
import time

import numpy as np

from ..errors import BuildError
from .devstats import Counts

_libs = {}
_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double, "int8": ctypes.c_int8,
           "int16": ctypes.c_int16, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
           "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32,
           "uint64": ctypes.c_uint64, "bool": ctypes.c_uint8}


class _Mem:
    def __init__(self, nbytes=0, array=None):
        self.array = np.zeros(max(int(nbytes), 8), np.uint8) if array is None else array
        self.ptr = self.array.ctypes.data


class EmuDevice:
    kind = "c"
    name = "GPU emulation on the host CPU"
    view_alignment = 1

    def __init__(self):
        self.counts = Counts()

    def alloc(self, nbytes):
        self.counts.alloc(nbytes)
        return _Mem(nbytes)

    def wrap(self, array):
        """A host array used in place as device memory (memory is host memory here)."""
        return _Mem(array=array)

    def view(self, mem, offset, nbytes):
        v = _Mem(array=mem.array)
        v.ptr = mem.ptr + int(offset)
        return v

    def stream(self):
        return None

    def copy_in(self, mem, array, stream=None):
        self.counts.to_device += 1
        a = np.ascontiguousarray(array)
        ctypes.memmove(mem.ptr, a.ctypes.data, a.nbytes)

    def copy_out(self, mem, array, stream=None):
        self.counts.to_host += 1
        ctypes.memmove(array.ctypes.data, mem.ptr, array.nbytes)

    def copy_dd(self, dst, src, nbytes, stream=None):
        self.counts.on_device += 1
        ctypes.memmove(dst.ptr, src.ptr, int(nbytes))

    def span(self, mem, nbytes):
        return ("host", mem.ptr, mem.ptr + nbytes)

    def load(self, source, names):
        fns = _libs.get(source)
        if fns is None:
            from .ccompiler import cached_library
            from .libfile import dlopen_bytes
            try:
                payload = cached_library(source, ["-O1", "-std=gnu11"], "emu",
                                         "the emulated GPU kernels")
            except BuildError as e:
                raise BuildError(f"{e}\n--- source ---\n{source}") from None
            lib = dlopen_bytes(payload, "the emulated GPU kernels")
            fns = {"__lib__": lib}
            for n in names:
                fn = getattr(lib, n + "_launch")
                fn.restype = ctypes.c_int32
                fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
                fns[n] = fn
            _libs[source] = fns
        return fns

    def scalar(self, value, dtype):
        return _CTYPES[dtype](value)

    def prepare(self, fn, grid, block, args, stream=None, shared=0):
        return lambda: self.launch(fn, grid, block, args)

    def capture(self, run, stream):
        return None

    def launch(self, fn, grid, block, args, stream=None, shared=0):
        argv = (ctypes.c_void_p * max(len(args), 1))()
        for i, a in enumerate(args):
            argv[i] = a.ptr if isinstance(a, _Mem) else ctypes.addressof(a)
        g = (ctypes.c_int64 * 3)(*grid)
        b = (ctypes.c_int64 * 3)(*block)
        rc = fn(argv, g, b)
        if rc:
            raise BuildError("the emulated kernel could not allocate its thread stacks")
        return None

    def sync(self, stream=None):
        pass

    def time(self, run, number, stream=None):
        t0 = time.perf_counter()
        for _ in range(number):
            run()
        return (time.perf_counter() - t0) / number


_device = None


def get_device():
    global _device
    if _device is None:
        _device = EmuDevice()
    return _device
