"""The search space of a template: knobs, their candidate values, and configs.

A template receives a `Config` and declares its knobs on it (`define_split`,
`define_reorder`, `define_knob`, `define_annotate`), then reads the chosen value back with
`cfg[name]`. The same template code runs in two modes:

- *define* mode (`create_task` runs the template once): every `define_*` call adds a knob
  to a `ConfigSpace` and `cfg[name]` answers the knob's default, so the template can go on
  building its default schedule;
- *apply* mode (a measurement, `apply_best`, or a plain call without a config): the config
  holds a value per knob name (JSON-able, as in the log) and `define_*` only turns that
  value into an entity (`SplitEntity`, `ReorderEntity`, ...); names it does not hold get
  the knob's default. Apply mode never needs the space, so a config travels to another
  process as a small dict.

The space is static: the knobs a template defines must not depend on the values of other
knobs (a knob defined only on some branch is tuned only if the default takes that branch).

Inside the space a config is a tuple of indices, one per knob in definition order; the
size of the space is the product of the knob sizes (a Python int; spaces larger than 2**63
are fine).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from ..ir import expr as E
from ..te.tensor import IterVar
from .entity import ENTITIES
from .errors import AutotuneError
from .knob import AnnotateKnob, Knob, OtherKnob, ReorderKnob, SplitKnob


class ConfigSpace:
    """The knobs of a template, in definition order."""

    def __init__(self):
        self.knobs: Dict[str, Knob] = {}
        self.template_name = None
        self.args = None

    def add(self, knob: Knob):
        if knob.name in self.knobs:
            raise AutotuneError(f"knob '{knob.name}' is defined twice")
        self.knobs[knob.name] = knob

    @property
    def names(self):
        return list(self.knobs)

    @property
    def dims(self) -> List[int]:
        return [len(k) for k in self.knobs.values()]

    def __len__(self):
        return math.prod(self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    def default_point(self) -> Tuple[int, ...]:
        return tuple(k.default for k in self.knobs.values())

    def point_from_index(self, index: int) -> Tuple[int, ...]:
        """Mixed-radix decoding of a flat index (first knob varies fastest)."""
        if not 0 <= index < self.size:
            raise IndexError(f"config index {index} outside a space of size {self.size}")
        out = []
        for d in self.dims:
            out.append(index % d)
            index //= d
        return tuple(out)

    def index_of_point(self, point) -> int:
        idx, mul = 0, 1
        for p, d in zip(point, self.dims):
            idx += p * mul
            mul *= d
        return idx

    def values_of(self, point) -> Dict[str, Any]:
        return {k.name: k.values[i] for k, i in zip(self.knobs.values(), point)}

    def point_of(self, values: Dict[str, Any]) -> Optional[Tuple[int, ...]]:
        """The point of a values dict, or None when a value is not a candidate here."""
        out = []
        for k in self.knobs.values():
            if k.name not in values:
                out.append(k.default)
                continue
            i = k.index_of(values[k.name])
            if i is None:
                return None
            out.append(i)
        return tuple(out)

    def get(self, index_or_point) -> "Config":
        """The config at a flat index or a point (tuple of knob indices)."""
        point = self.point_from_index(index_or_point) if isinstance(index_or_point, int) \
            else tuple(index_or_point)
        return Config(values=self.values_of(point), index=self.index_of_point(point))

    def default_config(self) -> "Config":
        return self.get(self.default_point())

    def __iter__(self):
        for i in range(self.size):
            yield self.get(i)

    def __repr__(self):
        head = f"ConfigSpace(size={self.size:,}"
        if self.template_name:
            head += f", template={self.template_name!r}"
        lines = [head + ")"]
        for k in self.knobs.values():
            lines.append(f"  {k.name:16s} {k.kind:9s} {k.describe()}")
        return "\n".join(lines)


def _axis_extent(axis, stage=None, what="define_split"):
    """The constant extent of `axis` (an int, or an IterVar: its domain, or for a loop made
    by split/fuse or a stage attached with compute_at, the range bound inference gives)."""
    if isinstance(axis, bool):
        raise AutotuneError(f"{what}: expected an axis or an int extent, got {axis!r}")
    if isinstance(axis, int):
        return axis
    if not isinstance(axis, IterVar):
        raise AutotuneError(f"{what}: expected an axis (IterVar) or an int extent, got {axis!r}")
    if stage is not None:
        from ..schedule import bound
        rng = None
        if stage.attach_type == "scope":
            try:
                rng = bound.infer_bounds(stage.schedule)[stage].ranges.get(axis)
            except Exception:   # a half-built schedule: fall back to the domains
                rng = None
        if rng is None:
            roots = {iv: iv.dom for iv in list(stage.op.axis) + list(stage.op.reduce_axis)
                     if iv.dom is not None}
            rng = bound.pass_down(stage, roots).get(axis)
        if rng is not None and isinstance(rng.extent, E.IntImm):
            return rng.extent.value
    if axis.dom is not None and isinstance(axis.dom.extent, E.IntImm):
        return axis.dom.extent.value
    if axis.dom is None and stage is None:
        raise AutotuneError(f"{what}: axis '{axis.var.name}' was made by split/fuse; pass its "
                            "stage (stage=s[T]) so its extent can be inferred, or give the "
                            "extent as an int")
    raise AutotuneError(f"{what}: axis '{axis.var.name}' has no constant extent; tunable "
                        "templates need constant shapes")


class Config:
    """What a template sees. In define mode (`space` given) it records knobs; in apply mode
    it holds one JSON value per knob name. `cfg[name]` is the entity of that knob."""

    def __init__(self, space: Optional[ConfigSpace] = None, values: Optional[Dict[str, Any]] = None,
                 index: Optional[int] = None, is_fallback: bool = False):
        self.space = space
        self.values: Dict[str, Any] = dict(values or {})
        self.index = index
        self.is_fallback = is_fallback
        self.flop = 0.0
        self._entities: Dict[str, Any] = {}

    @property
    def defining(self):
        return self.space is not None

    # ------------------------------------------------------------------ knob definitions
    def _define(self, name, kind, make_knob):
        if not isinstance(name, str) or not name:
            raise AutotuneError(f"a knob name must be a non-empty string, got {name!r}")
        if self.defining:
            knob = make_knob()
            self.space.add(knob)
            self.values[name] = knob.values[knob.default]
            self._entities[name] = knob.entity(knob.default)
        elif name in self.values:
            value = self.values[name]
            if kind == "knob":        # the choice itself (a tuple comes back from JSON as a list)
                knob = make_knob()
                i = knob.index_of(value)
                value = knob.values[i] if i is not None else value
            self._entities[name] = ENTITIES[kind].from_json(value)
        else:
            knob = make_knob()
            self.values[name] = knob.values[knob.default]
            self._entities[name] = knob.entity(knob.default)

    def define_split(self, name, axis, num_outputs=2, policy="all", max_factor=None,
                     candidate=None, default=None, stage=None):
        """A split of `axis` into `num_outputs` (2 to 4) loops. Candidates for each inner
        loop: see `split_factors` (policy "all", "factors" or "power2"), or an explicit
        `candidate=[[-1, 4, 8], ...]`. `default` (e.g. `[-1, 8]`) is the untuned choice
        (otherwise no split: `[-1, 1, ...]`). For a loop made by split/fuse pass its
        `stage` (or an int extent) so the extent is known."""
        if not isinstance(num_outputs, int) or not 2 <= num_outputs <= 4:
            raise AutotuneError(f"define_split '{name}': num_outputs must be 2, 3 or 4, got {num_outputs!r}")

        def make():
            try:
                ext = _axis_extent(axis, stage)
            except AutotuneError:
                if candidate is None:
                    raise
                ext = None            # explicit candidates do not need the extent
            pol = "candidate" if candidate is not None else policy
            return SplitKnob(name, ext, num_outputs, pol, max_factor, candidate, default)
        self._define(name, "split", make)

    def define_reorder(self, name, axes, policy="all", candidate=None):
        """A loop order of `axes`: all permutations, or `candidate=[[0, 2, 1], ...]`
        (indices into `axes`). `cfg[name].apply(s, T, axes)` reorders and returns them."""
        n = len(list(axes))
        self._define(name, "reorder", lambda: ReorderKnob(name, n, policy, candidate))

    def define_annotate(self, name, axes, policy="try_unroll", candidate=None):
        """Loop annotations for `axes`: policy "try_unroll" (each none/unroll),
        "try_vec" (the last none/vec), "try_unroll_vec", "try_parallel", or
        `candidate=[["none", "vec"], ...]`."""
        n = len(list(axes))
        self._define(name, "annotate", lambda: AnnotateKnob(name, n, policy, candidate))

    def define_knob(self, name, choices, default=None):
        """A plain choice among `choices` (JSON-able values); read it with `cfg[name].val`."""
        self._define(name, "knob", lambda: OtherKnob(name, choices, default))

    # ------------------------------------------------------------------ reading back
    def __getitem__(self, name):
        try:
            return self._entities[name]
        except KeyError:
            raise AutotuneError(f"knob '{name}' is read before it is defined "
                                f"(defined so far: {', '.join(self._entities) or 'none'})") from None

    def get(self, name, default=None):
        return self._entities.get(name, default)

    def __contains__(self, name):
        return name in self._entities

    def add_flop(self, flop):
        """Declares the floating point operations of the computation (for GFLOP/s); when
        not declared, they are counted from the compute definitions."""
        self.flop += float(flop)

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.values)

    def __reduce__(self):
        return (Config, (None, dict(self.values), self.index, self.is_fallback))

    def __repr__(self):
        body = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        idx = f"#{self.index} " if self.index is not None else ""
        return f"Config({idx}{body})"
