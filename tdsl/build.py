"""build(): lower a schedule and hand it to the code generator of the target."""
from __future__ import annotations

from .errors import BuildError
from .lower import lower


def _target_kind(target):
    if not isinstance(target, str) or not target.strip():
        raise BuildError(f"build: target must be a string such as 'llvm', got {target!r}")
    return target.split()[0]


def build(s, args=None, target="llvm", name="main"):
    """Compiles schedule `s` into a callable Module for `target`."""
    kind = _target_kind(target)
    if kind not in ("llvm",):
        raise BuildError(f"build: target {kind!r} is not available yet; use 'llvm'")
    func = lower(s, args, name)
    from .codegen import llvm
    return llvm.build(func, target)
