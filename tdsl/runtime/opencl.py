"""OpenCL runtime through pyopencl (imported on first use).

`get_device(i)` is the i-th OpenCL device over all platforms (GPU devices first, then the
rest; with the `pocl-binary-distribution` wheel a fresh machine has its CPU as a device).
Each device keeps one context and an in-order queue with profiling on; programs are built
once per source text.
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import BuildError, TdslError
from .devstats import Counts

_lock = threading.Lock()
_devices = {}
_all = None


def _cl():
    try:
        import pyopencl as cl
    except ImportError as e:
        raise TdslError("the OpenCL runtime needs pyopencl: pip install pyopencl "
                        f"pocl-binary-distribution (or tdsl[opencl]) ({e})") from None
    return cl


def _list_devices():
    global _all
    if _all is None:
        cl = _cl()
        try:
            platforms = cl.get_platforms()
        except Exception as e:  # no ICD loader / no platform
            raise TdslError(f"no OpenCL platform is available ({e}); install "
                            "pocl-binary-distribution for an OpenCL device on the CPU") from None
        devs = [d for p in platforms for d in p.get_devices()]
        gpu = [d for d in devs if d.type & cl.device_type.GPU]
        _all = gpu + [d for d in devs if d not in gpu]
    return _all


def get_device(index=0, probe=False):
    with _lock:
        dev = _devices.get(index)
        if dev is None:
            devs = _list_devices()
            if index >= len(devs):
                if probe:
                    return None
                raise TdslError(f"opencl({index}) does not exist: {len(devs)} OpenCL device(s) "
                                "found")
            dev = _devices[index] = OpenCLDevice(devs[index])
        return dev


class OpenCLDevice:
    kind = "opencl"

    def __init__(self, device):
        cl = _cl()
        self.cl = cl
        self.device = device
        self.name = device.name.strip()
        self.ctx = cl.Context([device])
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.max_group = device.max_work_group_size
        # a sub-buffer must start at a multiple of this (CL_DEVICE_MEM_BASE_ADDR_ALIGN, bits)
        self.view_alignment = max(device.mem_base_addr_align // 8, 1)
        self._programs = {}
        self.counts = Counts()

    # memory ------------------------------------------------------------------------------
    def alloc(self, nbytes):
        self.counts.alloc(nbytes)
        return self.cl.Buffer(self.ctx, self.cl.mem_flags.READ_WRITE, max(int(nbytes), 4))

    def view(self, buf, offset, nbytes):
        """Bytes [offset, offset + nbytes) of `buf` as a sub-buffer; `offset` (from the start
        of the allocation) must be a multiple of `view_alignment`."""
        base = getattr(buf, "tdsl_base", None) or (buf, 0)
        start = base[1] + int(offset)
        if start % self.view_alignment:
            raise TdslError(f"OpenCL: a sub-buffer at byte {start} is not aligned to "
                            f"{self.view_alignment} (CL_DEVICE_MEM_BASE_ADDR_ALIGN)")
        if start == 0 and nbytes == base[0].size:
            return base[0]
        sub = base[0].get_sub_region(start, max(int(nbytes), 1))
        sub.tdsl_base = (base[0], start)
        return sub

    def stream(self):
        return None     # one in-order queue per device: commands of one run stay in order

    def copy_in(self, buf, array, stream=None):
        self.counts.to_device += 1
        self.cl.enqueue_copy(self.queue, buf, np.ascontiguousarray(array), is_blocking=True)

    def copy_out(self, buf, array, stream=None):
        self.counts.to_host += 1
        self.cl.enqueue_copy(self.queue, array, buf, is_blocking=True)

    def copy_dd(self, dst, src, nbytes, stream=None):
        self.counts.on_device += 1
        self.cl.enqueue_copy(self.queue, dst, src, byte_count=int(nbytes))

    def span(self, buf, nbytes):
        base = getattr(buf, "tdsl_base", None)
        if base is None:
            return (id(buf), 0, nbytes)
        return (id(base[0]), base[1], base[1] + nbytes)

    # programs ----------------------------------------------------------------------------
    def load(self, source, names):
        prog = self._programs.get(source)
        if prog is None:
            try:
                prog = self.cl.Program(self.ctx, source).build()
            except Exception as e:
                raise BuildError(f"the OpenCL compiler rejected the generated kernel source: "
                                 f"{e}\n--- source ---\n{source}") from None
            self._programs[source] = prog
        return {n: self.cl.Kernel(prog, n) for n in names}

    def launch(self, kernel, grid, block, args, stream=None, shared=0):
        for i, a in enumerate(args):
            kernel.set_arg(i, a)
        gsize = tuple(g * b for g, b in zip(grid, block))
        return self.cl.enqueue_nd_range_kernel(self.queue, kernel, gsize, tuple(block))

    def prepare(self, kernel, grid, block, args, stream=None, shared=0):
        """A no-argument launch on fixed arguments. `kernel` must be this launch's own
        object (load() makes new ones): its arguments are set once, here, and setting
        arguments is the one OpenCL call that is not thread-safe."""
        for i, a in enumerate(args):
            kernel.set_arg(i, a)
        gsize = tuple(int(g) * int(b) for g, b in zip(grid, block))
        lsize = tuple(int(b) for b in block)
        enqueue, queue = self.cl.enqueue_nd_range_kernel, self.queue

        def run(_keep=args):
            return enqueue(queue, kernel, gsize, lsize)
        return run

    def capture(self, run, stream):
        return None

    def scalar(self, value, dtype):
        return np.dtype(dtype if dtype != "bool" else "uint8").type(value)

    def sync(self, stream=None):
        self.queue.finish()

    def time(self, run, number, stream=None):
        """Device seconds per run of `run()` (which returns its kernel events)."""
        events = []
        for _ in range(number):
            events.extend(e for e in run() if e is not None)
        self.queue.finish()
        if not events:
            return 0.0
        start = min(e.profile.start for e in events)
        end = max(e.profile.end for e in events)
        return (end - start) * 1e-9 / number


_probe = {}


def unusable_reason(index=0):
    """None when opencl(index) builds and runs a trivial kernel, else why not (cached).
    PoCL 3.0 (the pocl-binary-distribution wheel) cannot build for CPUs its LLVM 14 does
    not know (it asks for target CPU 'generic', e.g. on AMD Zen 5)."""
    if index not in _probe:
        try:
            dev = get_device(index)
            k = dev.load("__kernel void tdsl_probe(__global int *a) "
                         "{ a[get_global_id(0)] = 7; }", ["tdsl_probe"])["tdsl_probe"]
            buf = dev.alloc(16)
            dev.launch(k, (1, 1, 1), (4, 1, 1), [buf])
            out = np.zeros(4, np.int32)
            dev.copy_out(buf, out)
            _probe[index] = None if (out == 7).all() else "the probe kernel gave wrong results"
        except TdslError as e:
            _probe[index] = str(e).split("--- source ---")[0].strip()
    return _probe[index]
