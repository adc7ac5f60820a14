"""Builds through the C-family printer: GPU modules (CUDA, OpenCL) and plain C, one
function per target kind (what `tdsl.build` registers for it).

- `build_kernels(func, kind, printer)`: the source of the kernels of `func` (lowered for a
  GPU kind) printed by a C-family dialect, in a `DeviceModule`; a new source kind builds
  through it with its own dialect.
- `build_cuda(func)`: `CUDAPrinter`'s source in a `CUDAModule` (which adds ptxas's
  `resources()`), compiled to PTX through NVRTC at once when NVRTC is installed (so a
  build fails early on a source error, with or without a GPU).
- `build_opencl(func)`: `OpenCLPrinter`'s source, compiled when the program is first loaded.
- `build_c(func)`: C source with the LLVM backend's ABI plus the self-describing symbols of
  exported libraries (`__tdsl_signature`, `__tdsl_num_threads`), compiled by the system C
  compiler into a shared library and loaded like `tdsl.load_module` does; the kernels of a
  GPU schedule emulated on the CPU (`CGPUEmuPrinter`).
"""
from __future__ import annotations

import json

from ..errors import BuildError, TdslError
from ..runtime.device_module import DeviceModule
from .source.c import CPrinter
from .source.c_gpu import CGPUEmuPrinter
from .source.cuda import CUDAPrinter
from .source.opencl import OpenCLPrinter


def _signature(func, symbol):
    from .signature import make_signature
    return make_signature(func, symbol)


def build_kernels(func, kind, printer, module=DeviceModule):
    """A `module` (a `DeviceModule` class) of target kind `kind` holding the kernels of
    `func` as printed by `printer`, a C-family dialect class."""
    source = printer(func.attrs.get("size_ranges", {})).print_kernels(func)
    return module(func, kind, source, _signature(func, func.name))


def build_cuda(func):
    from ..runtime import cuda
    from .cuda_module import CUDAModule
    mod = build_kernels(func, "cuda", CUDAPrinter, CUDAModule)
    if cuda.have_nvrtc():
        cuda.compile_ptx(mod.source)
    else:
        mod.notes.append("NVRTC is not installed: the CUDA source was not compiled")
    return mod


def build_opencl(func):
    return build_kernels(func, "opencl", OpenCLPrinter)


def _c_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def c_source(func, symbol=None):
    symbol = symbol or f"tdsl_{func.name}"
    text = CPrinter(func.attrs.get("size_ranges", {})).print_c_function(func, symbol)
    sig = _signature(func, symbol)
    text += ("\nint32_t __tdsl_num_threads = 1;\n"
             f"const char *__tdsl_signature(void) {{ return {_c_string(json.dumps(sig))}; }}\n")
    return text, sig


def build_c(func):
    if "kernels" in func.attrs:   # a GPU schedule: kernels emulated on the CPU
        return build_kernels(func, "c", CGPUEmuPrinter)
    from ..runtime import ccompiler
    from ..runtime.aot import open_library
    from ..runtime.module import Module
    from ..runtime.signature import Signature
    text, sig = c_source(func)
    try:
        payload = ccompiler.cached_library(text, ["-O2", "-std=c11"], "c", "the 'c' target")
    except BuildError as e:
        raise BuildError(f"{e}\n--- source ---\n{text}") from None
    lib, _ = open_library(payload, f"the C module {func.name}")
    return Module(Signature(sig), CBackend(lib, sig, text, payload))


class CBackend:
    kind = "c"

    def __init__(self, lib, sig, text, payload):
        from ..runtime.aot import SharedLibBackend
        self._lib = SharedLibBackend(f"<the C module {sig['name']}>", lib, sig, payload)
        self.cfunc = self._lib.cfunc
        self.text = text

    def set_num_threads(self, n):
        pass

    def get_num_threads(self):
        return 1

    def source(self, fmt):
        if fmt in ("", "c"):
            return self.text
        raise TdslError(f"get_source: a 'c' module has its C source only ('' or 'c'), not {fmt!r}")

    def export(self, path, sig):
        self._lib.export(path, sig)
