"""Compiling generated CUDA C to PTX, with no GPU and no driver: NVRTC from the
`cuda-bindings` + `nvidia-cuda-nvrtc` wheels (`nvrtc_compile`), or `nvcc -ptx` when nvcc is
on the PATH (`nvcc_ptx`). Headers such as cuda_fp16.h come from a CUDA toolkit include
folder (`cuda_include_dir()`: $CUDA_HOME, $CUDA_PATH, nvcc's folder, /usr/local/cuda, or the
nvidia-* wheels that ship headers). `tdsl.runtime.cuda.compile_ptx` picks the architecture
(the GPU's, or the oldest tdsl builds for) and caches the PTX."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile

from ..errors import BuildError

DEFAULT_ARCH = os.environ.get("TDSL_CUDA_ARCH", "compute_80")


def cuda_include_dir():
    """A folder holding cuda_fp16.h, or None."""
    cands = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            cands.append(os.path.join(os.environ[env], "include"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = os.path.realpath(nvcc)
        cands.append(os.path.join(os.path.dirname(os.path.dirname(real)), "include"))
        cands.append(os.path.join(os.path.dirname(os.path.dirname(nvcc)), "include"))
    cands += ["/usr/local/cuda/include"] + sorted(glob.glob("/usr/local/cuda-*/include"),
                                                  reverse=True)
    try:
        import nvidia  # namespace package of the nvidia-* wheels
        for root in getattr(nvidia, "__path__", []):
            cands += glob.glob(os.path.join(root, "*", "include"))
    except ImportError:
        pass
    for c in cands:
        if os.path.exists(os.path.join(c, "cuda_fp16.h")):
            return c
    return None


def have_nvrtc() -> bool:
    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError:
        return False
    try:
        err, _, _ = nvrtc.nvrtcVersion()
        return int(err) == 0
    except Exception:
        return False


def _needs_headers(source):
    return "#include <cuda_fp16.h>" in source or "#include <cuda_bf16.h>" in source


def uses_wgmma(source: str) -> bool:
    return "wgmma.mma_async" in source


def fallback_arch(source: str) -> str:
    """The architecture to compile `source` for with no GPU to ask: the oldest tdsl builds
    for, or sm_90a, the only one with wgmma."""
    return "compute_90a" if uses_wgmma(source) else DEFAULT_ARCH


def arch_for(source: str, arch: str) -> str:
    """`arch` (compute_XX / sm_XX) for `source`: Hopper's warpgroup MMA (wgmma) exists only
    in the architecture-specific sm_90a, so a source using it compiles for 90a, and for
    no other architecture."""
    if not uses_wgmma(source):
        return arch
    kind, _, num = arch.partition("_")
    if num.rstrip("a") != "90":
        raise BuildError(f"the kernel uses wgmma (Hopper's warpgroup MMA), which only sm_90 "
                         f"GPUs have; it cannot be compiled for {arch}")
    return f"{kind}_90a"


def nvrtc_compile(source: str, arch: str, extra=()):
    """(PTX or None, NVRTC's log) for `source` compiled for `arch`: a virtual architecture
    (compute_XX) gives PTX; a real one (sm_XX) gives machine code, and no PTX is read back,
    the log then holds what `extra` options such as `--ptxas-options=-v` ask ptxas for."""
    from cuda.bindings import nvrtc
    arch = arch_for(source, arch)
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17"] + [o.encode() for o in extra]
    if _needs_headers(source):
        inc = cuda_include_dir()
        if inc is None:
            raise BuildError("the kernel uses float16 or bfloat16 and includes cuda_fp16.h or "
                             "cuda_bf16.h, which NVRTC "
                             "cannot find: install a CUDA toolkit or set CUDA_HOME")
        opts.append(f"-I{inc}".encode())
    try:
        err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"tdsl_kernel.cu", 0, [], [])
        _nvrtc_check(nvrtc, err, "nvrtcCreateProgram")
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        # NVRTC writes into the buffer it is given: it must be a mutable one. `b" " * n`
        # is the interpreter's shared b" " when n == 1 (an empty log), and writing its
        # NUL there turned every later b" " into b"\x00" in the whole process.
        log = bytearray(n)
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = bytes(log).decode(errors="replace").rstrip(chr(0))
        if int(err) != 0:
            raise BuildError(f"NVRTC rejected the generated CUDA source:\n{log}\n"
                             f"--- source ---\n{source}")
        ptx = None
        if arch.startswith("compute_"):
            err, n = nvrtc.nvrtcGetPTXSize(prog)
            _nvrtc_check(nvrtc, err, "nvrtcGetPTXSize")
            buf = bytearray(n)
            (err,) = nvrtc.nvrtcGetPTX(prog, buf)
            _nvrtc_check(nvrtc, err, "nvrtcGetPTX")
            ptx = bytes(buf).rstrip(b"\x00").decode()
        nvrtc.nvrtcDestroyProgram(prog)
    except BuildError:
        raise
    except Exception as e:  # the NVRTC library itself failed to load
        raise BuildError(f"NVRTC is not usable here ({type(e).__name__}: {e})") from None
    return ptx, log


def _nvrtc_check(nvrtc, err, what):
    if int(err) != 0:
        raise BuildError(f"{what} failed: {err}")


def nvcc_ptx(source: str, arch: str = "sm_80") -> str:
    """PTX for `source` through `nvcc -ptx` (BuildError when nvcc is missing or fails)."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        raise BuildError("nvcc is not on the PATH")
    with tempfile.TemporaryDirectory(prefix="tdsl_nvcc_") as tmp:
        src = os.path.join(tmp, "k.cu")
        out = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(source)
        r = subprocess.run([nvcc, "-ptx", f"-arch={arch}", "-o", out, src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"nvcc rejected the generated CUDA source:\n{r.stderr}\n"
                             f"--- source ---\n{source}")
        with open(out) as f:
            return f.read()
