"""LLVM target machines for a `tdsl.target.Target`.

The CPU facts (triple, CPU name, features, vector width) live in `tdsl.target`; this module
only creates the llvmlite target machines, once per target and process, since creating them
is the only noticeable fixed cost of a build. Two machines exist per target: the JIT one
(code model `jitdefault`) and, created lazily, a position-independent one for
`export_library`.
"""
from __future__ import annotations

import functools
import threading

from ...errors import BuildError
from ...target import Target, as_target, llvm_binding

__all__ = ["LLVMTarget", "parse_target"]


class LLVMTarget:
    """The target machines of one CPU `Target` (`.description`)."""

    def __init__(self, description: Target):
        self.description = description
        self.key = description.key
        self.triple = description.triple
        self.cpu = description.cpu
        self.features = description.features
        self.host = description.native
        self.vector_bits = description.vector_bits
        self.has_avx512 = description.arch == "x86_64" and description.vector_bits >= 512
        llvm = llvm_binding()
        self._target = llvm.Target.from_triple(self.triple)
        self.tm = self.new_jit_tm()
        self.data_layout = str(self.tm.target_data)
        self._tm_pic = None
        self._lock = threading.Lock()

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


def parse_target(target) -> LLVMTarget:
    """The `LLVMTarget` for a target string or `Target` (cached per target)."""
    if isinstance(target, LLVMTarget):
        return target
    desc = as_target(target)
    if desc.kind != "llvm":
        raise BuildError(f"the LLVM backend takes 'llvm' targets ('llvm -mcpu=NAME'), got {str(desc)!r}")
    return _machines(desc)


@functools.lru_cache(maxsize=None)
def _machines(desc: Target) -> LLVMTarget:
    return LLVMTarget(desc)
