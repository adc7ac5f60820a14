"""The reference runtimes held to the vector ISA of the tdsl build they are compared with.

`bench/zoo.py --mcpu haswell` on an AVX-512 host builds tdsl for AVX2; timed against
onnxruntime and OpenVINO as they are, the ratio is mostly the vector width, not what a
user on an AVX2 machine would see. What each reference lets us cap, on this host:

- OpenVINO (CPU plugin): two environment variables, both read once per process, so they
  must be set before `openvino` is imported: ONEDNN_MAX_CPU_ISA (its oneDNN fork: convs,
  pooling, reorders, FullyConnected layers with a fused epilogue) and OV_CPU_MAX_ISA (its own
  JIT kernels: reduces, eltwise, MHA, snippets; honoured by release builds since 2026.x).
  The cap shows in the compiled model: each layer's `primitiveType` names its kernel, e.g.
  brgconv_avx2_1x1_f32 instead of brgconv_avx512_1x1_f32, jit_avx2_f32 instead of
  jit_avx512_f32 (`ov_layer_isas`). Not capped: FullyConnected layers without a fused epilogue
  run MLAS (`gemm_mlas_f32`), which picks its kernels by CPUID alone; a perf sample of a
  capped 256x1024x1024 FullyConnected on a Zen 5 showed its hot loop on zmm registers
  (vfmadd231ps %zmm...), so those layers stay at the host's width, and the note says how
  many there are.
- onnxruntime: none. MLAS selects its kernels by CPUID and XGETBV once, with no environment
  variable or session option to cap them (1.32: none among its `session.*`/`mlas.*` config
  keys), and masking CPUID needs CPUID faulting, which this VM does not expose. Its
  columns stay at the host's ISA, and the ratios say so.
"""
from __future__ import annotations

import collections
import os
import sys

ENV = ("ONEDNN_MAX_CPU_ISA", "OV_CPU_MAX_ISA")

ORT_NOTE = ("onnxruntime: not capped (MLAS picks its kernels by CPUID; no environment variable "
            "or session option caps them): it runs at the host's ISA")


def cap_for(target, host) -> str:
    """The oneDNN ISA name to hold the references to for a tdsl build for `target` on
    `host`, or "" when the build is as wide as the host (nothing to cap)."""
    if target.vector_bits >= host.vector_bits:
        return ""
    return "AVX2" if target.vector_bits >= 256 else "SSE41"


def apply(isa: str) -> None:
    """Caps OpenVINO at `isa` for the rest of this process. Raises RuntimeError when
    openvino is already imported: its CPU plugin and oneDNN would have read their ISA
    already, and a cap set now would be silently ignored."""
    if "openvino" in sys.modules:
        raise RuntimeError("isa_cap.apply: openvino is already imported; set the cap before "
                           "it loads (its plugin reads ONEDNN_MAX_CPU_ISA/OV_CPU_MAX_ISA once)")
    for name in ENV:
        os.environ[name] = isa


def isa_of(primitive: str) -> str:
    """The ISA a kernel name says it was built for ("avx512", "avx2", "amx", "sse41"), "mlas"
    for MLAS (by CPUID, whatever the cap), "" for a name that says none (reference
    kernels, reorders "jit_uni", constants, reshapes)."""
    p = primitive.lower()
    if "mlas" in p:
        return "mlas"
    for isa in ("amx", "avx512", "avx2", "avx", "sse41"):
        if isa in p:
            return isa
    return ""


def ov_layer_isas(compiled) -> collections.Counter:
    """How many layers of an OpenVINO compiled model run kernels of each ISA (`isa_of` of
    each layer's primitiveType in its runtime model)."""
    n = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "primitiveType" in info:
            n[isa_of(str(info["primitiveType"].astype(str)))] += 1
    return n


def ov_note(isas: collections.Counter, cap: str) -> str:
    """A line saying at which ISA OpenVINO's layers ran, or "" when all ran at `cap` (or
    with no cap, always "")."""
    if not cap:
        return ""
    wide = {k: v for k, v in isas.items() if k in ("amx", "avx512")}
    parts = []
    if wide:
        parts.append(f"{sum(wide.values())} layers at {'/'.join(sorted(wide))} despite the cap")
    if isas.get("mlas"):
        parts.append(f"{isas['mlas']} FullyConnected layer{'s' if isas['mlas'] > 1 else ''} in MLAS "
                     "(picks by CPUID: the host's ISA)")
    if not parts:
        return ""
    capped = isas.get(cap.lower(), 0)
    return f"OpenVINO capped at {cap}: {capped} layers at {cap.lower()}, " + ", ".join(parts)


def header(cap: str, native: bool, host_isa: str) -> list[str]:
    """The lines under the target that say at which ISA each reference runs and how that
    was checked."""
    if native or not cap:
        why = " (--native-refs)" if native and cap else ""
        return [f"references at the host's ISA ({host_isa}){why}: onnxruntime and OpenVINO uncapped"]
    return [f"OpenVINO capped at {cap}: ONEDNN_MAX_CPU_ISA={cap} and OV_CPU_MAX_ISA={cap} set before it "
            "loaded; checked per model from its compiled layers' kernel names (a note says which "
            "layers ran wider: MLAS FullyConnected layers ignore the cap)",
            ORT_NOTE + f" ({host_isa})"]


def ov_wide_share(profile) -> float:
    """The share of an OpenVINO call's layer time (`request.get_profiling_info()`, compiled
    with PERF_COUNT) spent in layers whose kernel ran wider than a cap: MLAS, AVX-512, AMX."""
    total = wide = 0.0
    for p in profile:
        t = p.real_time.total_seconds()
        total += t
        if isa_of(p.exec_type) in ("mlas", "avx512", "amx"):
            wide += t
    return wide / total if total else 0.0
