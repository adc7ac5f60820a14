"""Builds through the C-family printer: GPU modules (CUDA, OpenCL) and plain C.

- `build_gpu(func, target)`: the kernels' source from `CUDAPrinter`/`OpenCLPrinter`; for
  CUDA it is compiled to PTX through NVRTC at once when NVRTC is installed (so a build
  fails early on a source error, with or without a GPU), for OpenCL when the program is
  first loaded. Returns a `DeviceModule`.
- `build_c(func)`: C source with the LLVM backend's ABI plus the self-describing symbols of
  exported libraries (`__tdsl_signature`, `__tdsl_num_threads`), compiled by the system C
  compiler into a shared library and loaded like `tdsl.load_module` does.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import tempfile

from ..errors import BuildError, TdslError
from .c_family import CPrinter, printer_for


def _signature(func, symbol):
    from .signature import make_signature
    return make_signature(func, symbol)


def build_gpu(func, target):
    from ..runtime.device_module import DeviceModule
    source = printer_for("c-gpu" if target == "c" else target, func).print_kernels(func)
    sig = _signature(func, func.name)
    mod = DeviceModule(func, target, source, sig)
    if target == "cuda":
        from ..runtime import cuda
        if cuda.have_nvrtc():
            cuda.compile_ptx(source)
        else:
            mod.notes.append("NVRTC is not installed: the CUDA source was not compiled")
    return mod


_c_cache = {}


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
        return build_gpu(func, "c")
    from ..runtime.aot import SharedLibBackend, _compiler
    from ..runtime.module import Module, Signature
    text, sig = c_source(func)
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    path = _c_cache.get(key)
    if path is None:
        d = tempfile.mkdtemp(prefix="tdsl_c_")
        src = os.path.join(d, "kernel.c")
        path = os.path.join(d, f"kernel_{key}.so")
        with open(src, "w") as f:
            f.write(text)
        cmd = [_compiler(), "-O2", "-std=c11", "-shared", "-fPIC", "-o", path, src, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"the C compiler rejected the generated source:\n{r.stderr}\n"
                             f"--- source ---\n{text}")
        _c_cache[key] = path
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise BuildError(f"cannot load the compiled C module: {e}") from None
    backend = CBackend(path, lib, sig, text)
    return Module(Signature(sig), backend)


class CBackend:
    kind = "c"

    def __init__(self, path, lib, sig, text):
        from ..runtime.aot import SharedLibBackend
        self._lib = SharedLibBackend(path, lib, sig)
        self.cfunc = self._lib.cfunc
        self.text = text
        self.path = path

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
