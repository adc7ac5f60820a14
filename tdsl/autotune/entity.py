"""Entities: the value of one knob, with the schedule transformation it stands for. A config
holds their JSON forms; `cfg[name]` is the entity (`.apply(s, T, axes)`, or `.val`)."""
from __future__ import annotations

from .errors import AutotuneError


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


# by knob kind: what a JSON value in a config turns back into
ENTITIES = {"split": SplitEntity, "reorder": ReorderEntity, "annotate": AnnotateEntity,
           "knob": OtherEntity}
