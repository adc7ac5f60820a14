"""build(): lower a schedule and hand it to the code generator of the target.

Targets: "llvm" (the host CPU through llvmlite), "c" (C source compiled by the system C
compiler), "cuda" (CUDA C, PTX through NVRTC, run through pycuda or cuda-bindings) and
"opencl" (OpenCL C through pyopencl). GPU builds return a `DeviceModule`.

LLVM builds go through the persistent compile cache twice: `cpu.compile_ir` keeps the
object file of each generated IR text, and here a build of a schedule whose fingerprint
(`tdsl.fingerprint`) was built before, in any process, skips lowering and IR generation
as well. `TDSL_DEBUG` (the IR after every pass) always lowers."""
from __future__ import annotations

import os

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
    if kind == "llvm":
        return _build_llvm(s, args, target, name)
    func = lower(s, args, name, target=kind)
    from .codegen import source_build
    if kind == "c":
        return source_build.build_c(func)
    return source_build.build_gpu(func, kind)


def _build_llvm(s, args, target, name):
    from .codegen import llvm
    from .runtime import cpu, diskcache, threadpool
    tgt = llvm.parse_target(target)
    fp = None
    if diskcache.enabled() and not int(os.environ.get("TDSL_DEBUG", "0") or 0):
        from .fingerprint import fingerprint
        # the worker pool's availability changes the generated IR
        fp = fingerprint(s, args, name, threadpool.load_into_jit())
        if fp is not None:
            mod = cpu.load_build(fp, tgt)
            if mod is not None:
                return mod
    mod = llvm.build(lower(s, args, name, target="llvm"), tgt)
    if fp is not None:
        cpu.remember_build(fp, tgt, mod)
    return mod
