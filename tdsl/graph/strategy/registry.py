"""The implementations of graph operators (TVM's OpStrategy): each says which operators it
defines and when (`applies`), defines them (`compute`), schedules a group for a target
family (`schedules`), and has a priority. `GroupDef.build` defines each node with the
implementation of the highest priority that takes it; a group is scheduled by the first
implementation, by priority, with a schedule for its family that takes the group.

An implementation with a `compute` and a schedule for a family is an anchor there: the last
node of a group it defines is the group's `GroupDef.anchor` (the implementation and the
tensor its compute returned), and its schedule runs only for that group (and where `fits`
holds). One without a `compute` schedules the groups its `fits` takes, finding the stages
it needs by their tags (tag.py). The lowest priority (fallback.py) defines every operator
with topi's expressions and schedules every group with the auto-scheduler's rules.

The shipped implementations are registered in implementations.py; `register` adds one
(`registered` for the length of a `with` block)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from ...errors import GraphError


@dataclass(eq=False)
class Implementation:
    """One way to define and schedule graph operators.

    name: shown in errors and `implementations()`; priority: higher is tried first.
    ops: the operators `compute` defines (None: every operator; empty: none, a schedule
    alone). family: the target family whose groups `compute` defines ("cpu": the llvm and
    C kernels with packed weights; "gpu"), None for every family.
    applies(g, n): whether `compute` takes node `n` of group definition `g` (GroupDef:
    its target, constants and parameters); None: always.
    compute(g, n, tensors) -> the tensor of node `n`; its inputs are
    `g.operand(arg, tensors)`.
    schedules: {family: schedule(s, out, g, **options)} (the "cpu" schedules take
    `parallel`); fits(out, g): whether the schedule takes the group whose output is `out`;
    None: always. symbolic: whether compute and schedules take a group with symbolic
    sizes (`g.symbolic`: node types and attributes then hold index expressions of size
    variables, `g.node_type(n)`, `g.attrs_of(n)`; `topi.dim` reads representative sizes)."""
    name: str
    priority: int
    ops: Optional[Tuple[str, ...]] = ()
    family: Optional[str] = None
    applies: Optional[Callable] = None
    compute: Optional[Callable] = None
    schedules: Dict[str, Callable] = field(default_factory=dict)
    fits: Optional[Callable] = None
    symbolic: bool = False

    def defines(self, g, n, family) -> bool:
        """Whether this implementation's compute takes node `n` in a group whose
        definitions are those of `family`."""
        return (self.compute is not None and (self.ops is None or n.op in self.ops)
                and (self.family is None or self.family == family)
                and (self.symbolic or not g.symbolic)
                and (self.applies is None or self.applies(g, n)))

    def takes(self, out, g, family) -> bool:
        """Whether this implementation's schedule for `family` takes the group."""
        if family not in self.schedules or g.symbolic and not self.symbolic:
            return False
        if self.compute is not None and (g.anchor is None or g.anchor.impl is not self):
            return False
        return self.fits is None or self.fits(out, g)


class Anchor(NamedTuple):
    """The node definition that schedules its group: the implementation and its tensor,
    tagged (tag.py) with what the schedule reads in its attrs."""
    impl: Implementation
    tensor: object


_IMPLEMENTATIONS: List[Implementation] = []     # highest priority first, then first registered
_LISTENERS: List[Callable] = []


def implementations() -> Tuple[Implementation, ...]:
    """The registered implementations in the order they are tried."""
    return tuple(_IMPLEMENTATIONS)


def register(impl: Implementation) -> Implementation:
    """Adds `impl`; among equal priorities the one registered first is tried first."""
    if any(i.name == impl.name for i in _IMPLEMENTATIONS):
        raise GraphError(f"strategy: an implementation named '{impl.name}' is registered already")
    at = next((k for k, i in enumerate(_IMPLEMENTATIONS) if i.priority < impl.priority), len(_IMPLEMENTATIONS))
    _IMPLEMENTATIONS.insert(at, impl)
    changed()
    return impl


def unregister(impl: Implementation):
    _IMPLEMENTATIONS.remove(impl)
    changed()


@contextlib.contextmanager
def registered(*impls: Implementation):
    """The implementations registered for the length of a `with` block."""
    done = []
    try:
        for impl in impls:
            done.append(register(impl))
        yield impls[0] if len(impls) == 1 else impls
    finally:
        for impl in reversed(done):
            unregister(impl)


def on_change(fn: Callable):
    """Calls fn() whenever the implementations or the target schedules change (the
    executor forgets the kernels it compiled with the old ones)."""
    _LISTENERS.append(fn)


def changed():
    for fn in _LISTENERS:
        fn()


def define(g, n, family) -> Implementation:
    """The implementation that defines node `n` of group definition `g`."""
    for impl in _IMPLEMENTATIONS:
        if impl.defines(g, n, family):
            return impl
    raise GraphError(f"no implementation defines operator '{n.op}'")


def schedule(s, out, g, family, **options) -> Implementation:
    """Schedules the group whose output is `out` with the first implementation that takes
    it; returns that implementation, whose name the group keeps (`g.scheduled_by`)."""
    for impl in _IMPLEMENTATIONS:
        if impl.takes(out, g, family):
            impl.schedules[family](s, out, g, **options)
            g.scheduled_by = impl.name
            return impl
    raise GraphError(f"no implementation schedules a group for target family '{family}'")
