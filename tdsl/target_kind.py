"""The registry of target kinds: one `TargetKind` per first word of a target string.

A kind says what everything that runs before code exists needs to know: whether it is a
GPU, its family ("cpu" or "gpu": which schedules, passes and graph definitions it takes),
whether GPU schedules are emulated on it, the device its arrays live on, the options its
target strings take. `tdsl.target` registers the shipped kinds (llvm, c, cuda, opencl);
the build step of a kind (code generator and runtime) is registered a level up, by
`tdsl.build.register_target_kind`, which registers the kind here too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from .errors import BuildError

# the options a target kind may take, as the error messages spell them
OPTIONS = {"-mcpu": "-mcpu=NAME", "-mattr": "-mattr=+feat,-feat", "-mtriple": "-mtriple=TRIPLE",
           "-num-cores": "-num-cores=N", "-arch": "-arch=sm_NN"}


@dataclass(frozen=True)
class TargetKind:
    """What a target kind is, for lowering (GPU passes or not), schedules and graph
    strategies (which family), the graph executor (the device that holds the arrays) and
    target parsing (the options).

    `name`: the first word of a target string. `family`: "cpu" or "gpu". `emulates_gpu`: a
    schedule that binds GPU threads, built for this kind, gets the GPU passes and runs its
    kernels emulated on the host ("c"). `device`: the `tdsl.Device` kind the arrays of its
    modules live on ("cpu": host memory). `options`: the names in `OPTIONS` it takes.
    `warp_shuffles`: cross-thread reductions shuffle within warps (else they go through
    shared memory). `gpu_facts(target)`: the `tdsl.target.GPUFacts` of a target of a GPU
    kind (None: those of a mid-sized GPU)."""
    name: str
    family: str
    emulates_gpu: bool = False
    device: str = "cpu"
    options: Tuple[str, ...] = ()
    warp_shuffles: bool = False
    gpu_facts: Optional[Callable] = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", self.name):
            raise BuildError(f"TargetKind: the name must be a lower-case word such as 'metal', "
                             f"got {self.name!r}")
        if self.family not in ("cpu", "gpu"):
            raise BuildError(f"TargetKind {self.name!r}: family must be 'cpu' or 'gpu', got "
                             f"{self.family!r}")
        unknown = [o for o in self.options if o not in OPTIONS]
        if unknown:
            raise BuildError(f"TargetKind {self.name!r}: unknown options {unknown}; the options "
                             f"are {', '.join(OPTIONS)}")

    @property
    def is_gpu(self) -> bool:
        return self.family == "gpu"


_KINDS: Dict[str, TargetKind] = {}
_version = [0]


def register_kind(kind: TargetKind, override: bool = False) -> TargetKind:
    """Adds `kind` to the registry (`override=True` replaces a kind of the same name)."""
    if not isinstance(kind, TargetKind):
        raise BuildError(f"register_kind: expected a TargetKind, got {kind!r}")
    if kind.name in _KINDS and not override:
        raise BuildError(f"target kind {kind.name!r} is already registered; pass override=True "
                         "to replace it")
    _KINDS[kind.name] = kind
    _version[0] += 1
    return kind


def unregister_kind(name: str) -> None:
    """Drops the kind `name` from the registry, if it is there."""
    if _KINDS.pop(name, None) is not None:
        _version[0] += 1


def kind_of(name) -> TargetKind:
    """The registered kind called `name` ("llvm", "cuda", ...); a BuildError naming it and
    the registered kinds when there is none."""
    kind = _KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise BuildError(f"unknown target kind {name!r}; the registered kinds are "
                         f"{', '.join(_KINDS)}")
    return kind


def kinds() -> Tuple[str, ...]:
    """The names of the registered kinds, in the order they were registered."""
    return tuple(_KINDS)


def registry_version() -> int:
    """A number that changes whenever a kind is registered or dropped (a cache of parsed
    targets keys on it)."""
    return _version[0]
