"""The target description: what the shipped schedules, the graph strategies, the autotuner
and the code generators know about the machine they build for.

`Target("llvm -mcpu=znver3")`, `Target("llvm")` (= `Target.host()`), `Target("c")`,
`Target("cuda")`, `Target("opencl")`. For CPU targets it holds the LLVM triple, CPU name and
feature string, and the facts schedules are sized from: vector width (`vector_lanes(dtype)`),
vector registers, FMA units and latency, cache sizes and cores.

Where the facts come from, and why:
- vector width and FMA: asked of LLVM itself, by compiling a 16-lane multiply-add for the
  target machine and reading which registers the assembly uses. That works for every CPU
  name LLVM knows (and any `-mattr=` change), with no table of feature sets to keep current.
- vector registers: the ISA's (x86: 32 with AVX-512, else 16; AArch64: 32).
- FMA units/latency and, for CPUs other than this machine's, cache sizes: a small table of
  microarchitectures (`_UARCH`), with conservative defaults for the rest.
- caches and cores of this machine: the OS (`/sys/devices/system/cpu`, the affinity mask).

Target options (after the kind): `-mcpu=NAME`, `-mattr=+feat,-feat`, `-mtriple=TRIPLE`
(compile-only for other architectures), `-num-cores=N`; for "cuda", `-arch=sm_NN`.

The kinds (the first word) are `TargetKind`s in the registry of `tdsl.target_kind`
(`kind_of(name)`: GPU or not, family, device, options); the shipped ones are registered at
the end of this module.

GPU targets carry the facts GPU schedules are sized from (SMs, registers, shared memory,
warp size; `GPUFacts`): for "cuda -arch=sm_NN" from a table of architectures, for plain
"cuda" from the device when one is present (asked lazily, on the first read of a fact, so
that describing a target never initialises a driver), else from the table for
`TDSL_CUDA_ARCH` (the architecture PTX is compiled for when no device says otherwise).
"""
from __future__ import annotations

import contextvars
import functools
import html
import os
import re
import tempfile
import threading
from typing import NamedTuple

from .errors import BuildError
from .gpu_arch import ARCHS, DEFAULT as DEFAULT_ARCH
from .target_kind import (OPTIONS, TargetKind, kind_of, kinds, register_kind,  # noqa: F401
                          registry_version, unregister_kind)

KiB, MiB = 1 << 10, 1 << 20


class GPUFacts(NamedTuple):
    sm_count: int                 # multiprocessors (OpenCL: compute units)
    registers_per_sm: int         # 32-bit registers shared by the resident threads of an SM
    max_registers_per_thread: int
    shared_memory_per_sm: int     # bytes, all resident blocks together
    shared_memory_bytes: int      # bytes one block may declare statically
    shared_memory_optin_bytes: int  # bytes one block may use at most (dynamic shared memory)
    max_threads_per_sm: int
    max_threads_per_block: int
    warp_size: int
    source: str                   # where the facts came from: "table" or "device"

# OpenCL, and GPU kinds that say nothing else: a mid-sized GPU; PoCL on the CPU accepts
# these sizes too
GENERIC_GPU_FACTS = GPUFacts(32, 64 * 1024, 255, 64 * KiB, 48 * KiB, 48 * KiB, 2048, 1024, 32,
                             "table")


def gpu_arch_facts(arch: str) -> GPUFacts:
    """The facts of a CUDA architecture ("sm_90") from `gpu_arch.ARCHS`; unknown ones get
    sm_80's."""
    a = ARCHS.get(arch, ARCHS[DEFAULT_ARCH])
    return GPUFacts(a.sm_count, a.registers, a.max_registers_per_thread, a.shared_bytes,
                    a.static_shared_per_block, a.max_shared_per_block, a.max_threads, a.max_threads_per_block, a.warp_size,
                    "table")

# name: (FMA issues per cycle at the full vector width, FMA latency, L1d, L2 per core, L3)
_UARCH = {
    "haswell": (2, 5, 32 * KiB, 256 * KiB, 8 * MiB),
    "broadwell": (2, 4, 32 * KiB, 256 * KiB, 8 * MiB),
    "skylake": (2, 4, 32 * KiB, 256 * KiB, 8 * MiB),
    "skylake-avx512": (2, 4, 32 * KiB, 1 * MiB, 16 * MiB),
    "cascadelake": (2, 4, 32 * KiB, 1 * MiB, 16 * MiB),
    "icelake-server": (2, 4, 48 * KiB, 1280 * KiB, 32 * MiB),
    "icelake-client": (1, 4, 48 * KiB, 512 * KiB, 8 * MiB),
    "tigerlake": (1, 4, 48 * KiB, 1280 * KiB, 12 * MiB),
    "sapphirerapids": (2, 4, 48 * KiB, 2 * MiB, 64 * MiB),
    "alderlake": (2, 4, 48 * KiB, 1280 * KiB, 24 * MiB),
    "znver1": (1, 5, 32 * KiB, 512 * KiB, 8 * MiB),
    "znver2": (2, 5, 32 * KiB, 512 * KiB, 16 * MiB),
    "znver3": (2, 4, 32 * KiB, 512 * KiB, 32 * MiB),
    "znver4": (1, 4, 32 * KiB, 1 * MiB, 32 * MiB),      # AVX-512 on 256-bit FMA pipes
    "znver5": (2, 4, 48 * KiB, 1 * MiB, 32 * MiB),
    "neoverse-n1": (2, 4, 64 * KiB, 1 * MiB, 32 * MiB),
    "neoverse-v1": (4, 4, 64 * KiB, 1 * MiB, 32 * MiB),
    "apple-m1": (4, 4, 128 * KiB, 12 * MiB, 8 * MiB),
}
_DEFAULT_UARCH = (2, 4, 32 * KiB, 512 * KiB, 8 * MiB)

# The 512-bit dot-product extensions of CPUs named with -mcpu (whose feature string is empty:
# LLVM fills it in, and llvmlite cannot ask LLVM for it); a host or -mattr feature wins.
_VNNI_CPUS = {"cascadelake", "cooperlake", "icelake-client", "icelake-server", "tigerlake",
              "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids",
              "graniterapids-d", "znver4", "znver5"}
_BF16_CPUS = {"cooperlake", "sapphirerapids", "emeraldrapids", "graniterapids",
              "graniterapids-d", "znver4", "znver5"}


def _has(feats, name, cpus, cpu):
    if f"+{name}" in feats:
        return True
    return f"-{name}" not in feats and cpu in cpus

_lock = threading.Lock()
_llvm_ready = False


def llvm_binding():
    """`llvmlite.binding` with every target initialised (never `llvm.initialize()`, which
    raises in llvmlite 0.50); all targets so that other triples compile."""
    global _llvm_ready
    import llvmlite.binding as llvm
    if not _llvm_ready:
        with _lock:
            if not _llvm_ready:
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                llvm.initialize_all_targets()
                llvm.initialize_all_asmprinters()
                _llvm_ready = True
    return llvm


class Target:
    """A build target and the machine facts schedules read. Immutable; equal when their
    canonical strings are equal. `str(t)` is the target string to build with."""

    def __init__(self, target="llvm"):
        if isinstance(target, Target):
            self.__dict__.update(target.__dict__)
            return
        if target is None:
            target = "llvm"
        if not isinstance(target, str) or not target.strip():
            raise BuildError(f"target must be a string such as 'llvm' or 'llvm -mcpu=znver3', "
                             f"got {target!r}")
        self.__dict__.update(_describe(*_parse(target)))

    @classmethod
    def host(cls) -> "Target":
        return cls("llvm")

    def __setattr__(self, name, value):
        raise AttributeError("a Target is immutable")

    # -- the target context -----------------------------------------------------------------
    def __enter__(self):
        _scope.set(_scope.get() + (self,))
        return self

    def __exit__(self, *exc):
        _scope.set(_scope.get()[:-1])
        return False

    @staticmethod
    def current(allow_none=True):
        """The target of the innermost `with Target(...)` block of this thread, else None
        (with `allow_none=False`, a BuildError instead)."""
        stack = _scope.get()
        if not stack and not allow_none:
            raise BuildError("Target.current(): no `with tdsl.target.Target(...)` block is active")
        return stack[-1] if stack else None

    # -- facts ------------------------------------------------------------------------------
    def vector_lanes(self, dtype="float32") -> int:
        """Elements of `dtype` in one vector register (1 for GPU targets)."""
        from . import dtype as dt
        if self.is_gpu:
            return 1
        bits = 8 if dtype == "bool" else dt.bits(dtype)
        return max(1, self.vector_bits // bits)

    def cache_bytes(self, level: int) -> int:
        """Size of the level-`level` data cache (1, 2 or 3) in bytes (L1/L2 per core)."""
        if level not in (1, 2, 3):
            raise BuildError(f"Target.cache_bytes: level must be 1, 2 or 3, got {level!r}")
        return self.caches[level - 1]

    @property
    def is_gpu(self) -> bool:
        """Whether the target's kind is a GPU (`tdsl.target.kind_of(t.kind)` has the rest)."""
        return kind_of(self.kind).is_gpu

    @property
    def family(self) -> str:
        """The kind's family, "cpu" or "gpu": the schedules and graph definitions it takes."""
        return kind_of(self.kind).family

    @property
    def fma_chains(self) -> int:
        """Independent multiply-add chains needed to keep every FMA unit busy."""
        return self.fma_units * self.fma_latency

    @property
    def peak_flops_per_cycle(self) -> int:
        """float32 flops per cycle per core at the full vector width."""
        return self.vector_lanes("float32") * self.fma_units * (2 if self.fma else 1)

    # -- GPU facts (GPU kinds only) -----------------------------------------------------------
    @property
    def gpu(self) -> GPUFacts:
        """SMs, registers, shared memory and warp size of a GPU target (read on first use)."""
        kind = kind_of(self.kind)
        if not kind.is_gpu:
            raise BuildError(f"Target.gpu: {self.key!r} is not a GPU target")
        return kind.gpu_facts(self) if kind.gpu_facts is not None else GENERIC_GPU_FACTS

    sm_count = property(lambda self: self.gpu.sm_count)
    warp_size = property(lambda self: self.gpu.warp_size)
    max_threads_per_block = property(lambda self: self.gpu.max_threads_per_block)
    shared_memory_bytes = property(lambda self: self.gpu.shared_memory_bytes)
    max_registers_per_thread = property(lambda self: self.gpu.max_registers_per_thread)

    @property
    def fingerprint(self) -> str:
        """What determines the generated code: the key for compile caches and tuning logs."""
        import hashlib
        digest = hashlib.sha1(self.features.encode()).hexdigest()[:12]
        return f"{self.kind}:{self.triple}:{self.cpu}:{digest}"

    # -- display ----------------------------------------------------------------------------
    def __str__(self):
        return self.key

    def __repr__(self):
        return f"Target({self.key!r})"

    def __eq__(self, other):
        return isinstance(other, Target) and other.fingerprint == self.fingerprint \
            and other.num_cores == self.num_cores

    def __hash__(self):
        return hash((self.fingerprint, self.num_cores))

    def rows(self):
        """(label, value) pairs: what `describe()` and the Jupyter display show."""
        if self.is_gpu:
            g = self.gpu
            return [("target", self.key), (f"SMs ({g.source})", str(g.sm_count)),
                    ("warp size", str(g.warp_size)),
                    ("registers", f"{g.registers_per_sm} per SM, {g.max_registers_per_thread} "
                                  "per thread"),
                    ("max threads", f"{g.max_threads_per_block} per block, "
                                    f"{g.max_threads_per_sm} per SM"),
                    ("shared memory", f"{_size(g.shared_memory_bytes)} per block "
                                      f"({_size(g.shared_memory_optin_bytes)} dynamic), "
                                      f"{_size(g.shared_memory_per_sm)} per SM")]
        return [
            ("target", self.key),
            ("cpu", f"{self.cpu} ({self.triple}){'' if self.runs_here else ', compile only'}"),
            ("vectors", f"{self.vector_bits}-bit, {self.vector_lanes('float32')} x float32, "
                        f"{self.vector_registers} registers"),
            ("fma", f"{self.fma_units} per cycle, latency {self.fma_latency}" if self.fma else "none"),
            ("caches", f"L1d {_size(self.caches[0])}, L2 {_size(self.caches[1])}, "
                       f"L3 {_size(self.caches[2])}{' (from the OS)' if self.caches_from_os else ''}"),
            ("cores", str(self.num_cores)),
            ("dot products", ", ".join(n for n, f in (("avx512_vnni", self.has_vnni),
                                                      ("avx512_bf16", self.has_bf16)) if f)
             or "none"),
        ]

    def describe(self) -> str:
        return "\n".join(f"{k:>12s}: {v}" for k, v in self.rows())

    def _repr_html_(self):
        body = "".join(f"<tr><th style='text-align:right'>{html.escape(k)}</th>"
                       f"<td style='text-align:left'>{html.escape(v)}</td></tr>" for k, v in self.rows())
        return f"<table>{body}</table>"


# the `with Target(...)` blocks entered, innermost last; a context variable, so each thread
# (and each asyncio task) has its own
_scope = contextvars.ContextVar("tdsl_target_scope", default=())


def as_target(target) -> Target:
    """A `Target` from a Target or a target string; None means the target of the enclosing
    `with Target(...)` block, else the host."""
    if target is None:
        target = Target.current() or "llvm"
    return target if isinstance(target, Target) else _cached(target, registry_version())


@functools.lru_cache(maxsize=256)
def _cached(spec: str, version: int) -> Target:
    # `version`: a target string parsed before a kind was registered or dropped is parsed
    # again
    return Target(spec)


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n // KiB} KiB"


# ------------------------------------------------------------------------------- parsing

def _parse(spec: str):
    parts = spec.split()
    kind = parts[0]
    if kind not in kinds():
        raise BuildError(f"unknown target {kind!r} in {spec!r}; use one of {', '.join(kinds())}")
    takes = kind_of(kind).options
    opts = {}
    for p in parts[1:]:
        if p == "-keys=cpu":
            continue
        name, eq, value = p.partition("=")
        if not eq or name not in OPTIONS:
            raise BuildError(f"unknown target option {p!r} in {spec!r}; supported: "
                             f"{', '.join(OPTIONS[o] for o in takes) or 'none'}")
        if name not in takes:
            raise BuildError(f"target {kind!r} takes no options"
                             f"{' but ' + ', '.join(OPTIONS[o] for o in takes) if takes else ''}, "
                             f"got {spec!r}")
        if name == "-arch" and not re.fullmatch(r"sm_\d+", value):
            raise BuildError(f"-arch must name a compute capability such as sm_90, got "
                             f"{value!r} in {spec!r}")
        opts[name] = value
    gpu_arch = opts.pop("-arch", None)
    mattr = tuple(a for a in opts.get("-mattr", "").split(",") if a)
    for a in mattr:
        if a[0] not in "+-":
            raise BuildError(f"-mattr features need a + or - sign, got {a!r} in {spec!r}")
    cores = opts.get("-num-cores")
    if cores is not None and (not cores.isdigit() or int(cores) < 1):
        raise BuildError(f"-num-cores must be a positive integer, got {cores!r} in {spec!r}")
    return (kind, opts.get("-mcpu"), mattr, opts.get("-mtriple"), int(cores) if cores else None,
            gpu_arch)


# ------------------------------------------------------------------------------ describing

@functools.lru_cache(maxsize=None)
def _host_cpu():
    """(triple, CPU name, features) of this machine. `TDSL_HOST_CPU=NAME` makes "llvm" mean
    that CPU instead (LLVM's features for it): an AVX-512 machine then builds, tests and
    benchmarks as an AVX2 one would (it must be able to run that CPU's code)."""
    llvm = llvm_binding()
    triple = llvm.get_process_triple()
    name = os.environ.get("TDSL_HOST_CPU")
    if name:
        _check_cpu(triple, name)
        return triple, name, ""
    name = _zen5_named_zen4(triple, llvm.get_host_cpu_name())
    try:
        feats = llvm.get_host_cpu_features().flatten()
    except RuntimeError:        # some platforms cannot report features
        feats = ""
    return triple, name, feats


def _zen5_named_zen4(triple, name):
    """Older LLVMs call a Zen 5 (family 26) "znver4", whose table entry (256-bit FMA pipes)
    would halve the FMA units and the chains schedules and the peak probe use."""
    if name != "znver4":
        return name
    try:
        with open("/proc/cpuinfo") as f:
            family = re.search(r"^cpu family\s*:\s*(\d+)", f.read(), re.M)
        if family and int(family.group(1)) == 26:
            _check_cpu(triple, "znver5")
            return "znver5"
    except (OSError, BuildError):
        pass
    return name


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=None)
def _os_caches():
    """(L1d, L2, L3) bytes of this machine from sysfs, or None where not readable."""
    found = {}
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in sorted(os.listdir(root)):
            if not d.startswith("index"):
                continue
            read = lambda f: open(os.path.join(root, d, f)).read().strip()   # noqa: E731
            level, kind, size = int(read("level")), read("type"), read("size")
            if kind == "Instruction":
                continue
            m = re.fullmatch(r"(\d+)([KMG]?)", size)
            if m:
                found[level] = int(m.group(1)) * {"": 1, "K": KiB, "M": MiB, "G": 1 << 30}[m.group(2)]
    except (OSError, ValueError):
        return None
    if 1 not in found or 2 not in found:
        return None
    return found[1], found[2], found.get(3, found[2])


def _describe(kind, cpu, mattr, triple, cores, gpu_arch=None):
    key = " ".join([kind] + ([f"-arch={gpu_arch}"] if gpu_arch else []) +
                   ([f"-mtriple={triple}"] if triple else []) +
                   ([f"-mcpu={cpu}"] if cpu else []) +
                   ([f"-mattr={','.join(mattr)}"] if mattr else []) +
                   ([f"-num-cores={cores}"] if cores else []))
    d = {"kind": kind, "key": key, "num_cores": cores or host_cores()}
    if kind_of(kind).is_gpu:
        # the architecture stands in the fingerprint's CPU field: it changes the schedules
        d.update(triple=kind, cpu=gpu_arch or "", features="", vector_bits=32, vector_registers=0,
                 fma=True, fma_units=1, fma_latency=4, caches=(0, 0, 0), caches_from_os=False,
                 runs_here=True, arch=kind, gpu_arch=gpu_arch, has_vnni=False, has_bf16=False)
        return d
    d.update(_cpu_facts(cpu, mattr, triple))
    return d


@functools.lru_cache(maxsize=None)
def _cuda_facts() -> GPUFacts:
    """The facts of CUDA device 0 when a driver and a device are present, else the table's
    for TDSL_CUDA_ARCH (default sm_80, what PTX is compiled for without a device)."""
    arch = os.environ.get("TDSL_CUDA_ARCH", "compute_80").replace("compute_", "sm_")
    if not os.path.exists("/dev/nvidiactl"):       # no driver: do not even import the bindings
        return gpu_arch_facts(arch)
    try:
        from cuda.bindings import driver as drv
        if int(drv.cuInit(0)[0]) != 0:
            return gpu_arch_facts(arch)
        err, dev = drv.cuDeviceGet(0)
        if int(err) != 0:
            return gpu_arch_facts(arch)
        A = drv.CUdevice_attribute

        def get(name):
            e, v = drv.cuDeviceGetAttribute(getattr(A, name), dev)
            if int(e) != 0:
                raise RuntimeError(name)
            return int(v)
        return GPUFacts(get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
                        get("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR"), 255,
                        get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
                        get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
                        get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
                        get("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR"),
                        get("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
                        get("CU_DEVICE_ATTRIBUTE_WARP_SIZE"), "device")
    except Exception:           # bindings missing or a driver that cannot answer: the table
        return gpu_arch_facts(arch)


@functools.lru_cache(maxsize=None)
def _cpu_facts(cpu, mattr, triple):
    host_triple, host_cpu, host_feats = _host_cpu()
    triple = triple or host_triple
    arch = triple.split("-")[0]
    native = triple == host_triple and cpu in (None, "native", host_cpu)
    if native:
        cpu = host_cpu
        feats = [f for f in host_feats.split(",") if f]
    else:
        cpu = cpu or ("generic" if triple != host_triple else host_cpu)
        _check_cpu(triple, cpu)
        feats = []
    if mattr:
        names = {f[1:]: i for i, f in enumerate(feats)}
        for a in mattr:
            if a[1:] in names:
                feats[names[a[1:]]] = a
            else:
                feats.append(a)
    features = ",".join(feats)
    bits, fma = _probe(triple, cpu, features)
    if arch in ("x86_64", "i686", "i386"):
        regs = 32 if bits >= 512 else 16
    elif arch in ("aarch64", "arm64", "riscv64"):
        regs = 32
    else:
        regs = 16
    units, latency, l1, l2, l3 = _UARCH.get(cpu, _DEFAULT_UARCH)
    os_caches = _os_caches() if (native or cpu == host_cpu) and triple == host_triple else None
    host_bits, host_fma = (_probe(host_triple, host_cpu, host_feats) if triple == host_triple
                           else (0, False))
    return {
        "triple": triple, "cpu": cpu, "features": features, "arch": arch,
        "vector_bits": bits, "vector_registers": regs, "fma": fma,
        "fma_units": units, "fma_latency": latency,
        "caches": os_caches or (l1, l2, l3), "caches_from_os": os_caches is not None,
        # Code for another CPU of this architecture runs here when the host has its vector
        # width and FMA (the features schedules use); other triples are compile-only.
        "runs_here": triple == host_triple and bits <= host_bits and (host_fma or not fma),
        "native": native and not mattr,
        # AVX512-VNNI (vpdpbusd: u8 x s8 dot products into int32) and AVX512-BF16
        # (vdpbf16ps: bfloat16 pairs into float32), what tdsl's CPU tensor intrinsics need
        "has_vnni": _has(feats, "avx512vnni", _VNNI_CPUS, cpu),
        "has_bf16": _has(feats, "avx512bf16", _BF16_CPUS, cpu),
    }


@functools.lru_cache(maxsize=None)
def _probe(triple, cpu, features):
    """(vector bits, has FMA) of the target machine, read off the assembly LLVM emits for a
    16-lane float add and a 4-lane fused multiply-add."""
    llvm = llvm_binding()
    ir_text = f"""
target triple = "{triple}"
define void @width(ptr noalias %a, ptr noalias %b) #0 {{
  %x = load <16 x float>, ptr %a, align 4
  %y = load <16 x float>, ptr %b, align 4
  %r = fadd <16 x float> %x, %y
  store <16 x float> %r, ptr %b, align 4
  ret void
}}
define <4 x float> @fma(<4 x float> %a, <4 x float> %b, <4 x float> %c) {{
  %r = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %b, <4 x float> %c)
  ret <4 x float> %r
}}
declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)
attributes #0 = {{ "min-legal-vector-width"="512" "prefer-vector-width"="512" }}
"""
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=1)
    asm = tm.emit_assembly(llvm.parse_assembly(ir_text))
    width_asm, _, fma_asm = asm.partition("fma:")
    bits = vector_bits_in_asm(width_asm) or 32
    fma = bool(re.search(r"vfmadd|\bfmla\b|\bfmadd\b|vfma", fma_asm)) and "fmaf" not in fma_asm
    return bits, fma


def vector_bits_in_asm(asm: str) -> int:
    """The widest vector register the assembly text uses (x86 zmm/ymm/xmm, AArch64 q/v
    registers), 0 if none."""
    if "%zmm" in asm:
        return 512
    if "%ymm" in asm:
        return 256
    if re.search(r"%xmm|\bv\d+\.(4s|2d|8h|16b)|\bq\d+\b", asm):
        return 128
    return 0


@functools.lru_cache(maxsize=None)
def _check_cpu(triple, cpu):
    """LLVM only prints a warning for an unknown CPU name (and may abort the process later),
    so the name is checked by capturing what it writes on file descriptor 2."""
    llvm = llvm_binding()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise BuildError(f"unknown target triple {triple!r}: {e}") from None
    with tempfile.TemporaryFile() as err, _lock:
        saved = os.dup(2)
        try:
            os.dup2(err.fileno(), 2)
            target.create_target_machine(cpu=cpu, features="")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        msg = err.read().decode(errors="replace")
    if "not a recognized processor" in msg:
        raise BuildError(f"unknown CPU {cpu!r} for {triple}: LLVM does not know it "
                         "(e.g. haswell, skylake-avx512, znver3, znver5, neoverse-n1)")


# ------------------------------------------------------------------------ the shipped kinds

def _cuda_target_facts(target):
    return gpu_arch_facts(target.gpu_arch) if target.gpu_arch else _cuda_facts()


register_kind(TargetKind("llvm", "cpu", options=("-mcpu", "-mattr", "-mtriple", "-num-cores")))
register_kind(TargetKind("c", "cpu", emulates_gpu=True))
register_kind(TargetKind("cuda", "gpu", device="cuda", options=("-arch",), warp_shuffles=True,
                         gpu_facts=_cuda_target_facts))
register_kind(TargetKind("opencl", "gpu", device="opencl"))

