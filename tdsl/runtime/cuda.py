"""CUDA: compiling generated CUDA C to PTX, and running it (all imported on first use).

Compiling needs no GPU and no driver (`compile_ptx`; NVRTC or nvcc, `cuda_compile.py`).

Running goes through pycuda when it is installed and works, otherwise through the
`cuda-bindings` driver API. Without a driver or a GPU, `get_device` raises a TdslError that
says so (and `tdsl.cuda(0).exist` is False).
"""
from __future__ import annotations

import ctypes
import shutil
import threading

import numpy as np

from ..errors import BuildError, TdslError
from .cuda_compile import (arch_for, cuda_include_dir, fallback_arch,  # noqa: F401
                           have_nvrtc, nvcc_ptx, nvrtc_compile)
from .devstats import Counts

_lock = threading.Lock()
_devices = {}
_ptx_cache = {}


# ----------------------------------------------------------------------------------------
# compiling (tdsl.runtime.cuda_compile)

def compile_ptx(source: str, arch: str = None) -> str:
    """PTX for `source` through NVRTC (falls back to nvcc when NVRTC is missing); for the
    GPU of this machine when `arch` is None, with none for the oldest tdsl builds for (for
    sm_90a where the source uses wgmma)."""
    arch = arch_for(source, arch or default_arch(source))
    key = (source, arch)
    ptx = _ptx_cache.get(key)
    if ptx is not None:
        return ptx
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        nvrtc = None
    if nvrtc is None:
        if shutil.which("nvcc"):
            ptx = nvcc_ptx(source, arch.replace("compute_", "sm_"))
            _ptx_cache[key] = ptx
            return ptx
        raise BuildError("compiling CUDA needs NVRTC (pip install cuda-bindings "
                         "nvidia-cuda-nvrtc, or tdsl[cuda]) or nvcc on the PATH")
    ptx, _ = nvrtc_compile(source, arch)
    _ptx_cache[key] = ptx
    return ptx


def default_arch(source: str = ""):
    """This machine's GPU's architecture; with none, the fallback for `source`."""
    dev = None
    try:
        dev = get_device(0, probe=True)
    except TdslError:
        dev = None
    if dev is not None:
        major, minor = dev.compute_capability
        return f"compute_{major}{minor}"
    return fallback_arch(source)


# ----------------------------------------------------------------------------------------
# devices


def get_device(index=0, probe=False):
    """The runtime of CUDA device `index` (None with probe=True when there is none)."""
    with _lock:
        dev = _devices.get(index)
        if dev is not None:
            return dev
        errors = []
        for cls in (_PyCudaDevice, _DriverDevice):
            try:
                dev = cls(index)
                break
            except _Unavailable as e:
                errors.append(str(e))
        if dev is None:
            if probe:
                return None
            raise TdslError(f"cuda({index}) is not available: " + "; ".join(errors) +
                            ". Building for target 'cuda' works without a GPU (get_source(), "
                            "get_source('ptx')); running the module needs an NVIDIA GPU and "
                            "driver")
        _devices[index] = dev
        return dev


class _Unavailable(Exception):
    pass


class _DeviceMemory:
    """Device memory owned by a Python object (freed when it is collected)."""

    def __init__(self, dev, ptr, nbytes):
        self.dev = dev
        self.ptr = int(ptr)
        self.nbytes = nbytes

    def __int__(self):
        return self.ptr

    def __del__(self):
        try:
            self.dev._free(self.ptr)
        except Exception:
            pass


class _DeviceView:
    """Bytes inside another allocation (an arena slice): a pointer, never freed; holds its
    base so the allocation outlives it."""

    def __init__(self, base, offset, nbytes):
        self.base = base
        self.ptr = int(base) + int(offset)
        self.nbytes = nbytes

    def __int__(self):
        return self.ptr


class _DriverDevice:
    """CUDA through NVIDIA's cuda-bindings driver API."""

    kind = "cuda"
    view_alignment = 1      # a pointer plus an offset; kernels ask no more than the plan gives

    def __init__(self, index):
        try:
            from cuda.bindings import driver
        except ImportError as e:
            raise _Unavailable(f"cuda-bindings is not installed ({e})")
        self.d = driver
        try:
            self._check(driver.cuInit(0), "cuInit")
            (self.dev,) = self._check(driver.cuDeviceGet(index), "cuDeviceGet")
            (self.ctx,) = self._check(driver.cuDevicePrimaryCtxRetain(self.dev),
                                      "cuDevicePrimaryCtxRetain")
            self._check(driver.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
            (name,) = self._check(driver.cuDeviceGetName(256, self.dev), "cuDeviceGetName")
            A = driver.CUdevice_attribute
            (major,) = self._check(driver.cuDeviceGetAttribute(
                A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev), "attribute")
            (minor,) = self._check(driver.cuDeviceGetAttribute(
                A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev), "attribute")
        except _Unavailable:
            raise
        except Exception as e:  # the driver library is missing
            raise _Unavailable(f"the CUDA driver cannot be loaded ({type(e).__name__}: {e})")
        self.name = bytes(name).split(b"\x00")[0].decode(errors="replace")
        self.compute_capability = (int(major), int(minor))
        self._modules = {}
        self.counts = Counts()

    def _check(self, res, what):
        if not isinstance(res, tuple):
            res = (res,)
        err = res[0]
        if int(err) != 0:
            raise _Unavailable(f"{what} failed: {err}")
        return res[1:]

    def _call(self, res, what):
        try:
            return self._check(res, what)
        except _Unavailable as e:
            raise TdslError(f"CUDA: {e}") from None

    def _current(self):
        self._call(self.d.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def alloc(self, nbytes):
        self._current()
        (ptr,) = self._call(self.d.cuMemAlloc(max(int(nbytes), 4)), "cuMemAlloc")
        self.counts.alloc(nbytes)
        return _DeviceMemory(self, int(ptr), nbytes)

    def view(self, mem, offset, nbytes):
        base = getattr(mem, "base", mem)
        return _DeviceView(base, int(mem) - int(base) + offset, nbytes)

    def _free(self, ptr):
        self.d.cuMemFree(self.d.CUdeviceptr(ptr))

    def stream(self):
        """A stream of its own (for one run state: concurrent runs overlap, and a graph can
        be captured from it, which the legacy default stream does not allow)."""
        self._current()
        (s,) = self._call(self.d.cuStreamCreate(self.d.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                          "cuStreamCreate")
        return s

    def copy_in(self, mem, array, stream=None):
        array = np.ascontiguousarray(array)
        self._current()
        self.counts.to_device += 1
        if stream is None:
            self._call(self.d.cuMemcpyHtoD(self.d.CUdeviceptr(mem.ptr), array.ctypes.data,
                                           array.nbytes), "cuMemcpyHtoD")
        else:    # pageable host memory: staged, so `array` may be reused when this returns
            self._call(self.d.cuMemcpyHtoDAsync(self.d.CUdeviceptr(mem.ptr), array.ctypes.data,
                                                array.nbytes, stream), "cuMemcpyHtoDAsync")

    def copy_out(self, mem, array, stream=None):
        self._current()
        self.counts.to_host += 1
        if stream is None:
            self._call(self.d.cuMemcpyDtoH(array.ctypes.data, self.d.CUdeviceptr(mem.ptr),
                                           array.nbytes), "cuMemcpyDtoH")
        else:
            self._call(self.d.cuMemcpyDtoHAsync(array.ctypes.data, self.d.CUdeviceptr(mem.ptr),
                                                array.nbytes, stream), "cuMemcpyDtoHAsync")
            self.sync(stream)

    def copy_dd(self, dst, src, nbytes, stream=None):
        self._current()
        self.counts.on_device += 1
        self._call(self.d.cuMemcpyDtoDAsync(self.d.CUdeviceptr(dst.ptr), self.d.CUdeviceptr(src.ptr),
                                            nbytes, _s(stream)), "cuMemcpyDtoDAsync")

    def span(self, mem, nbytes):
        return ("cuda", mem.ptr, mem.ptr + nbytes)

    def load(self, source, names):
        """{name: function} of `names` ({kernel: bytes of dynamic shared memory})."""
        mods = self._modules.get(source)
        if mods is None:
            major, minor = self.compute_capability
            ptx = compile_ptx(source, f"compute_{major}{minor}")
            self._current()
            (module,) = self._call(self.d.cuModuleLoadData(ptx.encode() + b"\x00"),
                                   "cuModuleLoadData")
            mods = {}
            for n in names:
                (fn,) = self._call(self.d.cuModuleGetFunction(module, n.encode()),
                                   "cuModuleGetFunction")
                if names[n]:       # dynamic shared memory past 48 KiB: the kernel opts in
                    attr = self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                    self._call(self.d.cuFuncSetAttribute(fn, attr, names[n]),
                               f"cuFuncSetAttribute ({n}: {names[n]} bytes of shared memory)")
                mods[n] = fn
            self._modules[source] = mods
        return mods

    def scalar(self, value, dtype):
        return np.dtype(dtype if dtype != "bool" else "uint8").type(value)

    @staticmethod
    def _pack(args):
        """(holders, pointer array) for cuLaunchKernel: each parameter's bytes, kept alive
        by the holders."""
        holders = []
        for a in args:
            if isinstance(a, (_DeviceMemory, _DeviceView)):
                holders.append(ctypes.c_uint64(a.ptr))
            else:
                holders.append(np.array(a))  # a numpy scalar: its bytes are the parameter
        ptrs = (ctypes.c_void_p * max(len(holders), 1))()
        for i, h in enumerate(holders):
            ptrs[i] = ctypes.addressof(h) if isinstance(h, ctypes.c_uint64) else h.ctypes.data
        return holders, ptrs

    def launch(self, fn, grid, block, args, stream=None, shared=0):
        holders, ptrs = self._pack(args)
        self._current()
        self._call(self.d.cuLaunchKernel(fn, *[int(g) for g in grid], *[int(b) for b in block],
                                         int(shared), _s(stream), ctypes.addressof(ptrs), 0),
                   "cuLaunchKernel")
        return holders

    def prepare(self, fn, grid, block, args, stream=None, shared=0):
        """A no-argument launch of `fn` on fixed arguments: sizes and the parameter pointer
        array are made once (the per-launch Python work is then one driver call)."""
        holders, ptrs = self._pack(args)
        g = [int(x) for x in grid] + [int(x) for x in block]
        address, launch, call, s = ctypes.addressof(ptrs), self.d.cuLaunchKernel, self._call, _s(stream)

        def run(_keep=(holders, ptrs, args)):
            call(launch(fn, *g, int(shared), s, address, 0), "cuLaunchKernel")
        return run

    def capture(self, run, stream):
        """`run` (launches on `stream`, nothing else) recorded once as a CUDA graph; returns
        a no-argument replay that launches the whole sequence with one driver call, or None
        when the stream cannot be captured (the caller keeps `run`)."""
        if stream is None:
            return None
        d = self.d
        self._current()
        try:
            self._check(d.cuStreamBeginCapture(
                stream, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")
        except _Unavailable:
            return None
        try:
            run()
        finally:
            res = d.cuStreamEndCapture(stream)
        (graph,) = self._call(res, "cuStreamEndCapture")
        try:
            (exe,) = self._call(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        finally:
            d.cuGraphDestroy(graph)
        call, launch = self._call, d.cuGraphLaunch

        def replay(_exe=_GraphExec(d, exe)):
            call(launch(_exe.handle, stream), "cuGraphLaunch")
        return replay

    def sync(self, stream=None):
        self._current()
        if stream is None:
            self._call(self.d.cuCtxSynchronize(), "cuCtxSynchronize")
        else:
            self._call(self.d.cuStreamSynchronize(stream), "cuStreamSynchronize")

    def time(self, run, number, stream=None):
        self._current()
        (start,) = self._call(self.d.cuEventCreate(0), "cuEventCreate")
        (end,) = self._call(self.d.cuEventCreate(0), "cuEventCreate")
        self._call(self.d.cuEventRecord(start, _s(stream)), "cuEventRecord")
        keep = [run() for _ in range(number)]
        self._call(self.d.cuEventRecord(end, _s(stream)), "cuEventRecord")
        self._call(self.d.cuEventSynchronize(end), "cuEventSynchronize")
        (ms,) = self._call(self.d.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        del keep
        self.d.cuEventDestroy(start)
        self.d.cuEventDestroy(end)
        return float(ms) * 1e-3 / number


def _s(stream):
    return 0 if stream is None else stream


class _GraphExec:
    """An instantiated CUDA graph, destroyed with the object."""

    def __init__(self, d, handle):
        self.d, self.handle = d, handle

    def __del__(self):
        try:
            self.d.cuGraphExecDestroy(self.handle)
        except Exception:
            pass


class _PyCudaDevice:
    """CUDA through pycuda (used when it is installed and finds a driver)."""

    kind = "cuda"
    view_alignment = 1

    def __init__(self, index):
        try:
            import pycuda.driver as drv
            drv.init()
            self.device = drv.Device(index)
            self.ctx = self.device.retain_primary_context()
        except ImportError as e:
            raise _Unavailable(f"pycuda is not installed ({e})")
        except Exception as e:
            raise _Unavailable(f"pycuda found no usable GPU ({type(e).__name__}: {e})")
        self.drv = drv
        self.name = self.device.name()
        self.compute_capability = tuple(self.device.compute_capability())
        self._modules = {}
        self.counts = Counts()

    def _push(self):
        self.ctx.push()

    def _pop(self):
        self.drv.Context.pop()

    def alloc(self, nbytes):
        self._push()
        try:
            mem = self.drv.mem_alloc(max(int(nbytes), 4))
            self.counts.alloc(nbytes)
            return mem
        finally:
            self._pop()

    def view(self, mem, offset, nbytes):
        base = getattr(mem, "base", mem)
        return _DeviceView(base, int(mem) - int(base) + offset, nbytes)

    def stream(self):
        return None     # runs go on the default stream; no graph capture through pycuda

    def copy_in(self, mem, array, stream=None):
        self._push()
        try:
            self.counts.to_device += 1
            self.drv.memcpy_htod(int(mem), np.ascontiguousarray(array))
        finally:
            self._pop()

    def copy_out(self, mem, array, stream=None):
        self._push()
        try:
            self.counts.to_host += 1
            self.drv.memcpy_dtoh(array, int(mem))
        finally:
            self._pop()

    def copy_dd(self, dst, src, nbytes, stream=None):
        self._push()
        try:
            self.counts.on_device += 1
            self.drv.memcpy_dtod(int(dst), int(src), nbytes)
        finally:
            self._pop()

    def span(self, mem, nbytes):
        return ("cuda", int(mem), int(mem) + nbytes)

    def load(self, source, names):
        mods = self._modules.get(source)
        if mods is None:
            major, minor = self.compute_capability
            ptx = compile_ptx(source, f"compute_{major}{minor}")
            self._push()
            try:
                module = self.drv.module_from_buffer(ptx.encode())
                mods = {n: module.get_function(n) for n in names}
                for n in (n for n in names if names[n]):
                    mods[n].set_attribute(self.drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          names[n])
            finally:
                self._pop()
            mods["__module__"] = module
            self._modules[source] = mods
        return mods

    def scalar(self, value, dtype):
        return np.dtype(dtype if dtype != "bool" else "uint8").type(value)

    def launch(self, fn, grid, block, args, stream=None, shared=0):
        args = [np.uintp(a.ptr) if isinstance(a, _DeviceView) else a for a in args]
        self._push()
        try:
            fn(*args, grid=tuple(int(g) for g in grid), block=tuple(int(b) for b in block),
               shared=int(shared))
        finally:
            self._pop()

    def prepare(self, fn, grid, block, args, stream=None, shared=0):
        return lambda: self.launch(fn, grid, block, args, shared=shared)

    def capture(self, run, stream):
        return None

    def sync(self, stream=None):
        self._push()
        try:
            self.drv.Context.synchronize()
        finally:
            self._pop()

    def time(self, run, number, stream=None):
        self._push()
        try:
            start, end = self.drv.Event(), self.drv.Event()
            start.record()
        finally:
            self._pop()
        for _ in range(number):
            run()
        self._push()
        try:
            end.record()
            end.synchronize()
            return start.time_till(end) * 1e-3 / number
        finally:
            self._pop()
