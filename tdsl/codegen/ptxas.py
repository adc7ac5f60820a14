"""What ptxas says a CUDA kernel costs: registers, spills, stack, shared memory, and the
occupancy those allow (`tdsl.gpu_arch`). No GPU is needed.

This is inspecting compiled code, so it lives with the code generators; the runtime only
loads and calls (and the layers keep it from importing codegen: `CUDAModule` here adds
`resources()` to the runtime's `DeviceModule`).

Two ways to ask ptxas, tried in order (`tool="auto"`):
- "nvrtc": NVRTC compiles the source for the real architecture with `--ptxas-options=-v`.
  NVRTC is what made the module's PTX, so its ptxas always reads that PTX version, and
  nothing beyond the CUDA build's own wheels is needed.
- "ptxas": the standalone `ptxas -v` on the module's PTX, from the PATH or the
  `nvidia-cuda-nvcc` wheel. A ptxas older than the PTX rejects its `.version`; the line is
  then lowered to the version ptxas names (tdsl's kernels use no newer instruction, and
  ptxas would reject one) and the report says so.
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Dict, List

from ..errors import BuildError
from ..gpu_arch import ARCHS, Occupancy, occupancy

TOOLS = ("auto", "nvrtc", "ptxas")
INSTALL = ("pip install cuda-bindings nvidia-cuda-nvrtc (NVRTC runs ptxas itself), or "
           "pip install nvidia-cuda-nvcc (ptxas), or put a CUDA toolkit's bin/ on the PATH")

_cache: Dict[str, str] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class KernelResources:
    """One kernel on one architecture, as ptxas compiled it."""
    kernel: str
    arch: str
    threads: int                # per block, from the launch configuration
    registers: int              # per thread
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    shared_bytes: int           # shared memory per block, static and dynamic
    occupancy: Occupancy = field(compare=False)

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def __str__(self):
        return (f"{self.kernel} {self.arch}: {self.threads} threads, {self.registers} registers, "
                f"{self.spill_bytes} spill bytes, {self.stack_bytes} stack bytes, "
                f"{self.shared_bytes} shared bytes, occupancy {self.occupancy}")


# ------------------------------------------------------------------------------ running

def find_ptxas():
    """The standalone ptxas: on the PATH, or in an nvidia-* wheel's bin/ folder; or None."""
    found = shutil.which("ptxas")
    if found:
        return found
    try:
        import nvidia  # the namespace package of the nvidia-* wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for cand in sorted(glob.glob(os.path.join(root, "*", "bin", "ptxas"))):
            if os.access(cand, os.X_OK):
                return cand
    return None


def _pick(tool):
    from ..runtime import cuda
    if tool not in TOOLS:
        raise BuildError(f"ptxas: tool must be one of {', '.join(TOOLS)}, got {tool!r}")
    if tool in ("auto", "nvrtc") and cuda.have_nvrtc():
        return "nvrtc"
    if tool in ("auto", "ptxas") and find_ptxas():
        return "ptxas"
    want = {"nvrtc": "NVRTC", "ptxas": "a ptxas executable"}.get(tool, "NVRTC or ptxas")
    raise BuildError(f"reading a CUDA kernel's registers and spills needs {want}, which is not "
                     f"installed: {INSTALL}")


def report(source: str, arch: str = "sm_90", tool: str = "auto") -> str:
    """ptxas's `-v` report for the kernels of CUDA `source` compiled for `arch` (sm_XX)."""
    if arch not in ARCHS:
        raise BuildError(f"ptxas: unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    tool = _pick(tool)
    from ..runtime import cuda
    # the PTX of the oldest architecture tdsl builds for; sm_90a's for wgmma
    arch = cuda.arch_for(source, arch)
    text = source if tool == "nvrtc" else cuda.compile_ptx(
        source, "compute_90a" if arch == "sm_90a" else "compute_80")
    key = hashlib.sha256(f"{tool}\0{arch}\0{text}".encode()).hexdigest()
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    if tool == "nvrtc":
        _, out = cuda.nvrtc_compile(source, arch, ["--ptxas-options=-v"])
    else:
        out = _run_ptxas(text, arch)
    with _lock:
        _cache[key] = out
    return out


def _run_ptxas(ptx, arch):
    exe = find_ptxas()
    with tempfile.TemporaryDirectory(prefix="tdsl_ptxas_") as tmp:
        path = os.path.join(tmp, "k.ptx")
        note = ""
        for _ in range(2):
            with open(path, "w") as f:
                f.write(ptx)
            r = subprocess.run([exe, "-v", f"-arch={arch}", path, "-o", os.devnull],
                               capture_output=True, text=True)
            if r.returncode == 0:
                return note + r.stdout + r.stderr
            m = re.search(r"Unsupported \.version (\S+); current version is '(\S+)'", r.stderr)
            if not m or note:
                break
            note = (f"(tdsl: {exe} reads PTX up to version {m.group(2)}; the module's "
                    f".version {m.group(1)} was lowered to it)\n")
            ptx = re.sub(r"^\.version \S+", f".version {m.group(2)}", ptx, count=1, flags=re.M)
    raise BuildError(f"ptxas ({exe}) rejected the module's PTX:\n{r.stderr}")


# ------------------------------------------------------------------------------ parsing

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PROPS = re.compile(r"Function properties for (\S+)")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse(text: str) -> Dict[str, dict]:
    """{kernel: {registers, spill_store_bytes, spill_load_bytes, stack_bytes, shared_bytes,
    arch}} from a `ptxas -v` report (standalone or through NVRTC's log)."""
    out, cur, name, props_for = {}, None, None, None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            name = m.group(1)
            cur = out.setdefault(name, {"arch": m.group(2), "registers": 0,
                                        "spill_store_bytes": 0, "spill_load_bytes": 0,
                                        "stack_bytes": 0, "shared_bytes": 0})
            continue
        if cur is None:
            continue
        m = _PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and props_for == name:   # a called device function has its own frame line
            cur["stack_bytes"], cur["spill_store_bytes"], cur["spill_load_bytes"] = map(int, m.groups())
            continue
        m = _USED.search(line)
        if m:
            cur["registers"] = int(m.group(1))
            s = _SMEM.search(line)
            cur["shared_bytes"] = int(s.group(1)) if s else 0
            cur = None
    return out


def resources(source: str, kernels, arch: str = "sm_90", tool: str = "auto") -> List[KernelResources]:
    """A `KernelResources` per kernel (objects with `.name` and `.block`) of `source`."""
    found = parse(report(source, arch, tool))
    out = []
    for k in kernels:
        r = found.get(k.name)
        if r is None:
            raise BuildError(f"ptxas reported no kernel named {k.name!r} (it reported "
                             f"{', '.join(found) or 'none'})")
        threads = 1
        for b in k.block:
            threads *= int(b)
        # ptxas counts static shared memory only; a launch adds the dynamic bytes
        smem = r["shared_bytes"] + getattr(k, "dynamic_shared_bytes", 0)
        occ = occupancy(arch, threads, r["registers"], smem)
        out.append(KernelResources(k.name, arch, threads, r["registers"], r["spill_store_bytes"],
                                   r["spill_load_bytes"], r["stack_bytes"], smem, occ))
    return out
