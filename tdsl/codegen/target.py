"""LLVM target strings: `"llvm"` (the host CPU) or `"llvm -mcpu=NAME [-mattr=+f,-g]"`.

A `LLVMTarget` holds the target machine(s) for one target string; they are created once
per process and cached, since creating them is the only noticeable fixed cost of a build.
Two machines exist per target: the JIT one (code model `jitdefault`) and, created lazily,
a position-independent one for `export_library`.
"""
from __future__ import annotations

import functools
import threading

from ..errors import BuildError

_init_lock = threading.Lock()
_initialized = False


def llvm_binding():
    """`llvmlite.binding`, with the native target initialised (never `llvm.initialize()`)."""
    global _initialized
    import llvmlite.binding as llvm
    if not _initialized:
        with _init_lock:
            if not _initialized:
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                _initialized = True
    return llvm


class LLVMTarget:
    """A parsed `llvm ...` target: triple, CPU name, feature string and target machines."""

    def __init__(self, key: str, cpu: str, features: str, host: bool):
        self.key = key
        self.cpu = cpu
        self.features = features
        self.host = host
        llvm = llvm_binding()
        self.triple = llvm.get_process_triple()
        self._target = llvm.Target.from_triple(self.triple)
        self.tm = self._target.create_target_machine(
            cpu=cpu, features=features, opt=3, codemodel="jitdefault")
        self.data_layout = str(self.tm.target_data)
        self._tm_pic = None
        self._lock = threading.Lock()
        feats = set(f[1:] for f in features.split(",") if f.startswith("+"))
        if "avx512f" in feats:
            self.vector_bits = 512
        elif "avx" in feats or "avx2" in feats:
            self.vector_bits = 256
        else:
            self.vector_bits = 128
        self.has_avx512 = "avx512f" in feats

    def new_jit_tm(self):
        """A fresh JIT target machine: an MCJIT engine takes ownership of (and deletes)
        the machine it is created with, so engines never share `self.tm`."""
        return self._target.create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, codemodel="jitdefault")

    @property
    def tm_pic(self):
        """A target machine for position-independent object files (shared libraries)."""
        if self._tm_pic is None:
            with self._lock:
                if self._tm_pic is None:
                    self._tm_pic = self._target.create_target_machine(
                        cpu=self.cpu, features=self.features, opt=3, reloc="pic",
                        codemodel="default")
        return self._tm_pic

    def __repr__(self):
        return f"LLVMTarget({self.key!r}, cpu={self.cpu!r})"


@functools.lru_cache(maxsize=None)
def _host_cpu():
    llvm = llvm_binding()
    name = llvm.get_host_cpu_name()
    try:
        feats = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # some platforms cannot report features
        feats = ""
    return name, feats


def parse_target(target) -> LLVMTarget:
    """The `LLVMTarget` for a target string (cached per normalised string)."""
    if isinstance(target, LLVMTarget):
        return target
    if target is None:
        target = "llvm"
    if not isinstance(target, str):
        raise BuildError(f"target must be a string such as 'llvm', got {target!r}")
    parts = target.split()
    if not parts or parts[0] != "llvm":
        raise BuildError(f"the LLVM backend takes targets 'llvm' or 'llvm -mcpu=NAME', "
                         f"got {target!r}")
    cpu = None
    mattr = []
    for p in parts[1:]:
        if p.startswith("-mcpu="):
            cpu = p[len("-mcpu="):]
        elif p.startswith("-mattr="):
            mattr.extend(a for a in p[len("-mattr="):].split(",") if a)
        elif p in ("-keys=cpu",):
            continue
        else:
            raise BuildError(f"unknown LLVM target option {p!r} in {target!r}; "
                             "supported: -mcpu=NAME, -mattr=+feat,-feat")
    for a in mattr:
        if a[0] not in "+-":
            raise BuildError(f"-mattr features need a + or - sign, got {a!r} in {target!r}")
    return _make_target(cpu or "native", tuple(mattr))


@functools.lru_cache(maxsize=None)
def _make_target(cpu: str, mattr: tuple) -> LLVMTarget:
    host_cpu, host_feats = _host_cpu()
    host = cpu in ("native", host_cpu)
    if host:
        feats = [f for f in host_feats.split(",") if f]
        cpu_name = host_cpu
    else:
        llvm = llvm_binding()
        target = llvm.Target.from_triple(llvm.get_process_triple())
        try:
            # Validate the CPU name: LLVM only warns on stderr for unknown ones.
            tm = target.create_target_machine(cpu=cpu, features="")
            del tm
        except RuntimeError as e:  # pragma: no cover
            raise BuildError(f"unknown CPU {cpu!r}: {e}") from None
        feats = []
        cpu_name = cpu
    if mattr:
        names = {f[1:]: i for i, f in enumerate(feats)}
        for a in mattr:
            if a[1:] in names:
                feats[names[a[1:]]] = a
            else:
                feats.append(a)
    key = "llvm" if host and not mattr else " ".join(
        ["llvm", f"-mcpu={cpu_name}"] + ([f"-mattr={','.join(mattr)}"] if mattr else []))
    return LLVMTarget(key, cpu_name, ",".join(feats), host and not mattr)
