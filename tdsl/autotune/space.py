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

import itertools
import json
import math
from typing import Any, Dict, List, Optional, Tuple

from ..errors import TdslError
from ..ir import expr as E
from ..te.tensor import IterVar


class AutotuneError(TdslError):
    """A mistake in a template, a task or a tuning call."""


# ======================================================================================
# entities: the value of one knob, with the schedule transformation it stands for


def _stage(s, tensor):
    return s[tensor]


class SplitEntity:
    """A split of one axis into `len(size)` loops. `size[0]` is -1 (the outer loop takes
    what is left); `size[1:]` are the extents of the inner loops, outermost first."""

    kind = "split"

    def __init__(self, size):
        self.size = [int(x) for x in size]

    def apply(self, s, tensor, axis):
        """Splits `axis` of `s[tensor]`; returns the loops, outermost first."""
        st = _stage(s, tensor)
        inner = []
        for f in reversed(self.size[1:]):
            axis, i = st.split(axis, factor=int(f))
            inner.append(i)
        return [axis] + inner[::-1]

    def to_json(self):
        return list(self.size)

    @classmethod
    def from_json(cls, v):
        return cls(v)

    def __getitem__(self, i):
        return self.size[i]

    def __repr__(self):
        return f"Split({self.size})"


class ReorderEntity:
    """A permutation: `perm[k]` is the index (in the declared axes) of the k-th loop."""

    kind = "reorder"

    def __init__(self, perm):
        self.perm = [int(x) for x in perm]

    def apply(self, s, tensor, axes):
        axes = list(axes)
        if len(axes) != len(self.perm):
            raise AutotuneError(f"reorder knob over {len(self.perm)} axes applied to {len(axes)} axes")
        new = [axes[i] for i in self.perm]
        _stage(s, tensor).reorder(*new)
        return new

    def to_json(self):
        return list(self.perm)

    @classmethod
    def from_json(cls, v):
        return cls(v)

    def __repr__(self):
        return f"Reorder({self.perm})"


ANNOTATIONS = ("none", "unroll", "vec", "parallel")


class AnnotateEntity:
    """One annotation per axis: "none", "unroll", "vec" or "parallel"."""

    kind = "annotate"

    def __init__(self, anns):
        self.anns = [str(a) for a in anns]

    def apply(self, s, tensor, axes):
        axes = list(axes)
        if len(axes) != len(self.anns):
            raise AutotuneError(f"annotate knob over {len(self.anns)} axes applied to {len(axes)} axes")
        st = _stage(s, tensor)
        for ax, a in zip(axes, self.anns):
            if a == "unroll":
                st.unroll(ax)
            elif a == "vec":
                st.vectorize(ax)
            elif a == "parallel":
                st.parallel(ax)
        return axes

    def to_json(self):
        return list(self.anns)

    @classmethod
    def from_json(cls, v):
        return cls(v)

    def __repr__(self):
        return f"Annotate({self.anns})"


class OtherEntity:
    """A plain choice: `.val` is the chosen value."""

    kind = "knob"

    def __init__(self, val):
        self.val = val

    def to_json(self):
        return self.val

    @classmethod
    def from_json(cls, v):
        return cls(v)

    def __eq__(self, other):
        return self.val == (other.val if isinstance(other, OtherEntity) else other)

    __hash__ = None

    def __repr__(self):
        return f"Knob({self.val!r})"


_ENTITY = {"split": SplitEntity, "reorder": ReorderEntity, "annotate": AnnotateEntity,
           "knob": OtherEntity}


def _json_key(v):
    """A hashable form of a JSON value (lists become tuples)."""
    if isinstance(v, list):
        return tuple(_json_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _json_key(x)) for k, x in v.items()))
    return v


# ======================================================================================
# knobs: the candidate values of one name


class Knob:
    """A named list of candidate values (JSON forms of entities) and a default index."""

    kind = "?"

    def __init__(self, name, values: List[Any], default: int = 0):
        if not values:
            raise AutotuneError(f"knob '{name}' has no candidate values")
        self.name = name
        self.values = values
        self.default = default
        self._index = {}
        for i, v in enumerate(values):
            self._index.setdefault(_json_key(v), i)

    def __len__(self):
        return len(self.values)

    def entity(self, i):
        return _ENTITY[self.kind].from_json(self.values[i])

    def index_of(self, value) -> Optional[int]:
        return self._index.get(_json_key(value))

    def features(self, i) -> List[float]:
        """Numbers describing candidate i, for cost models."""
        return [float(i)]

    def describe(self):
        return f"{len(self)} candidates"


def _divisors(n):
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def split_factors(extent: int, policy: str = "all", max_factor: Optional[int] = None) -> List[int]:
    """Candidate extents of one inner loop of a split of `extent`.

    - "factors": the divisors of the extent;
    - "power2": the powers of two up to the extent (non-divisors unless the extent is one);
    - "all": divisors, powers of two and every size from 1 to 16, so both exact and ragged
      (guarded) tilings are searched.
    """
    if policy == "factors":
        out = set(_divisors(extent))
    elif policy == "power2":
        out = {1 << k for k in range(0, max(extent, 1).bit_length()) if (1 << k) <= extent}
    elif policy == "all":
        out = set(_divisors(extent)) | {1 << k for k in range(extent.bit_length()) if (1 << k) <= extent}
        out |= set(range(1, min(extent, 16) + 1))
    else:
        raise AutotuneError(f"define_split: unknown policy {policy!r}; use 'all', 'factors', "
                            "'power2' or 'candidate'")
    if max_factor is not None:
        out = {f for f in out if f <= max_factor}
    return sorted(out or {1})


class SplitKnob(Knob):
    kind = "split"

    def __init__(self, name, extent, num_outputs, policy="all", max_factor=None, candidate=None,
                 default=None):
        self.extent = extent
        self.num_outputs = num_outputs
        self.policy = policy
        if candidate is not None:
            values = []
            for c in candidate:
                c = [int(x) for x in c]
                if len(c) != num_outputs:
                    raise AutotuneError(f"define_split '{name}': candidate {c} does not have "
                                        f"num_outputs={num_outputs} entries")
                values.append([-1] + c[1:])
        else:
            if extent is None:
                raise AutotuneError(f"define_split '{name}': the extent is unknown")
            factors = split_factors(extent, policy, max_factor)
            values = []
            for combo in itertools.product(factors, repeat=num_outputs - 1):
                # innermost split first: each factor must fit what is left of the axis
                left, ok = extent, True
                for f in reversed(combo):
                    if f > left:
                        ok = False
                        break
                    left = -(-left // f)
                if ok and (policy != "factors" or extent % math.prod(combo) == 0):
                    values.append([-1] + list(combo))
        dflt = 0
        if default is not None:
            d = [-1] + [int(x) for x in list(default)[1:]]
            if len(d) != num_outputs:
                raise AutotuneError(f"define_split '{name}': default {list(default)} does not "
                                    f"have num_outputs={num_outputs} entries")
            if _json_key(d) not in {_json_key(v) for v in values}:
                values.insert(0, d)
            dflt = [_json_key(v) for v in values].index(_json_key(d))
        else:
            one = [-1] + [1] * (num_outputs - 1)
            keys = [_json_key(v) for v in values]
            if _json_key(one) in keys:
                dflt = keys.index(_json_key(one))
        super().__init__(name, values, dflt)
        self._rem = []
        for v in self.values:
            left = extent or 0
            rem = 0.0
            for f in reversed(v[1:]):
                if left and left % f:
                    rem = 1.0
                left = -(-left // f) if left else 0
            self._rem.append(rem)

    def features(self, i):
        v = self.values[i]
        return [math.log2(max(f, 1)) for f in v[1:]] + [self._rem[i]]

    def describe(self):
        ext = self.extent if self.extent is not None else "?"
        return f"extent {ext} into {self.num_outputs} loops ({self.policy}): {len(self)} candidates"


class ReorderKnob(Knob):
    kind = "reorder"

    def __init__(self, name, n_axes, policy="all", candidate=None):
        self.n_axes = n_axes
        if policy == "candidate" or candidate is not None:
            if not candidate:
                raise AutotuneError(f"define_reorder '{name}': policy 'candidate' needs candidate=[...]")
            values = []
            for c in candidate:
                c = [int(x) for x in c]
                if sorted(c) != list(range(n_axes)):
                    raise AutotuneError(f"define_reorder '{name}': candidate {c} is not a "
                                        f"permutation of 0..{n_axes - 1}")
                values.append(c)
        elif policy == "all":
            if n_axes > 7:
                raise AutotuneError(f"define_reorder '{name}': {n_axes} axes have too many "
                                    "orders; give candidate=[...]")
            values = [list(p) for p in itertools.permutations(range(n_axes))]
        elif policy == "identity":
            values = [list(range(n_axes))]
        else:
            raise AutotuneError(f"define_reorder '{name}': unknown policy {policy!r}; use "
                                "'all', 'identity' or 'candidate'")
        super().__init__(name, values, 0)

    def features(self, i):
        # position of each axis in the order
        pos = [0.0] * self.n_axes
        for k, a in enumerate(self.values[i]):
            pos[a] = float(k)
        return pos

    def describe(self):
        return f"orders of {self.n_axes} axes: {len(self)} candidates"


_ANNOTATE_POLICIES = {
    # policy -> (choices for every axis but the last, choices for the last)
    "try_unroll": (("none", "unroll"), ("none", "unroll")),
    "try_vec": (("none",), ("none", "vec")),
    "try_unroll_vec": (("none", "unroll"), ("none", "unroll", "vec")),
    "try_parallel": (("none",), ("none", "parallel")),
    "none": (("none",), ("none",)),
}


class AnnotateKnob(Knob):
    kind = "annotate"

    def __init__(self, name, n_axes, policy="try_unroll", candidate=None):
        self.n_axes = n_axes
        if candidate is not None:
            values = []
            for c in candidate:
                c = [str(a) for a in c]
                if len(c) != n_axes or any(a not in ANNOTATIONS for a in c):
                    raise AutotuneError(f"define_annotate '{name}': candidate {c} must give one "
                                        f"of {ANNOTATIONS} for each of the {n_axes} axes")
                values.append(c)
        else:
            if policy not in _ANNOTATE_POLICIES:
                raise AutotuneError(f"define_annotate '{name}': unknown policy {policy!r}; use "
                                    f"one of {sorted(_ANNOTATE_POLICIES)} or candidate=[...]")
            rest, last = _ANNOTATE_POLICIES[policy]
            per_axis = [rest] * (n_axes - 1) + [last]
            values = [list(p) for p in itertools.product(*per_axis)]
        super().__init__(name, values, 0)

    def features(self, i):
        out = []
        for a in self.values[i]:
            out += [1.0 if a == b else 0.0 for b in ANNOTATIONS[1:]]
        return out

    def describe(self):
        return f"annotations of {self.n_axes} axes: {len(self)} candidates"


class OtherKnob(Knob):
    kind = "knob"

    def __init__(self, name, choices, default=None):
        choices = list(choices)
        for c in choices:
            try:
                json.dumps(c)
            except (TypeError, ValueError):
                raise AutotuneError(f"define_knob '{name}': choice {c!r} cannot be written to "
                                    "the log (use numbers, strings, booleans or lists)") from None
        dflt = 0
        if default is not None:
            if default not in choices:
                raise AutotuneError(f"define_knob '{name}': default {default!r} is not one of {choices}")
            dflt = choices.index(default)
        super().__init__(name, choices, dflt)
        self._numeric = all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices)

    def features(self, i):
        v = self.values[i]
        if self._numeric:
            return [float(v), math.log2(v) if v > 0 else -1.0]
        if len(self.values) <= 2:
            return [float(i)]
        return [1.0 if j == i else 0.0 for j in range(len(self.values))]

    def describe(self):
        return f"choices {self.values}"


# ======================================================================================
# the space and the config a template sees


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
            self._entities[name] = _ENTITY[kind].from_json(value)
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
