"""Knobs: the candidate values of one name (JSON forms of entities), their default, and the
numbers cost models read. `Config.define_*` makes one per call in define mode."""
from __future__ import annotations

import itertools
import json
import math
from typing import Any, List, Optional

from .entity import ANNOTATIONS, ENTITIES
from .errors import AutotuneError


def _json_key(v):
    """A hashable form of a JSON value (lists become tuples)."""
    if isinstance(v, list):
        return tuple(_json_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _json_key(x)) for k, x in v.items()))
    return v


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
        return ENTITIES[self.kind].from_json(self.values[i])

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
