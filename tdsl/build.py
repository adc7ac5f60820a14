"""build(): lower a schedule and hand it to the code generator of the target.

Targets: "llvm" (the host CPU through llvmlite), "c" (C source compiled by the system C
compiler), "cuda" (CUDA C, PTX through NVRTC, run through pycuda or cuda-bindings) and
"opencl" (OpenCL C through pyopencl). GPU builds return a `DeviceModule`."""
from __future__ import annotations

from .errors import BuildError
from .lower import lower

TARGETS = ("llvm", "c", "cuda", "opencl")


def build(s, args=None, target="llvm", name="main"):
    """Compiles schedule `s` into a callable Module for `target`."""
    if not isinstance(target, str) or not target.strip():
        raise BuildError(f"build: target must be a string such as 'llvm', got {target!r}")
    kind = target.split()[0]
    if kind not in TARGETS:
        raise BuildError(f"build: unknown target {kind!r}; use one of {', '.join(TARGETS)}")
    if kind != "llvm" and len(target.split()) > 1:
        raise BuildError(f"build: target {kind!r} takes no options, got {target!r}")
    func = lower(s, args, name, target=kind)
    if kind == "llvm":
        from .codegen import llvm
        return llvm.build(func, target)
    from .codegen import source_build
    if kind == "c":
        return source_build.build_c(func)
    return source_build.build_gpu(func, kind)
