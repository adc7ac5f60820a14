"""A group with symbolic sizes (graph dimensions that are sympy expressions of size
variables, ir/dims.py) as tensor expressions: each size variable becomes a `tdsl.size_var`
of the kernel, bound per call from its arguments' shapes, and every dimension or
attribute that holds one becomes the matching index expression.

The schedules' heuristics read numbers (`topi.dim`): a size variable reads as its
representative size, `REPRESENTATIVE` unless the module's declared bounds say otherwise;
the kernel computes the right result at every size and is tuned for that one.
"""
from __future__ import annotations

from typing import Dict

import sympy

import tdsl

from ..ir.dims import free_vars

REPRESENTATIVE = 64      # a size variable's size where a schedule needs a number
# the size of the variant "short" (dispatch._variant): a row of one 512-bit vector of
# float32, which the rules tile without unrolling, so a row of a short sequence is a
# vector or two, not one guarded block of four
SHORT = 16
# the size classes of short rows, each scheduled at SHORT, one vector a step: "short"
# (a group's contiguous extents below REPRESENTATIVE) and an attention's "short_keys"
# (fewer keys than its blocked kernel's tiles, strategy/cpu/attention.py)
SHORT_CLASSES = ("short", "short_keys")


def group_size_vars(fn) -> set:
    """The size variables in group function `fn`'s parameter and node types and in its
    nodes' attributes (a reshape's new shape, the values of `size_values`)."""
    out = free_vars([p.type.shape for p in fn.params])
    for n in fn.nodes():
        out |= free_vars([n.type.shape])
        out |= free_vars([v for v in n.attrs.values() if isinstance(v, (list, tuple, sympy.Expr))])
    return out


def representative(names, bounds=None, size=REPRESENTATIVE) -> Dict[str, int]:
    """{size variable name: the size schedules are tuned for}: `size` clamped to the
    variable's declared (low, high) bounds."""
    bounds = bounds or {}
    out = {}
    for name in names:
        lo, hi = bounds.get(name, (1, None))
        v = max(size, lo)
        out[name] = min(v, hi) if hi is not None else v
    return out


def buffer_atoms(buffer_dims, names) -> Dict[sympy.Expr, str]:
    """The compound sizes of a kernel's buffers that it must take as size variables of
    their own: a kernel binds its size variables from its arguments' shapes, and an axis
    of `batch*sequence` elements binds neither alone. Each compound dimension whose
    variables are not all some axis's whole size becomes a variable named after it."""
    bare = {d.name for d in buffer_dims if isinstance(d, sympy.Symbol)}
    atoms = {}
    for d in buffer_dims:
        if isinstance(d, sympy.Expr) and not isinstance(d, sympy.Symbol) and \
                not {v.name for v in d.free_symbols} <= bare and d not in atoms:
            name = "_".join(v.name for v in sorted(d.free_symbols, key=lambda v: v.name))
            base = name = f"{name}_{len(atoms)}" if name in names else name
            k = 1
            while name in names or name in atoms.values():
                name, k = f"{base}_{k}", k + 1
            atoms[d] = name
    return atoms


class TeSizes:
    """sympy dimensions -> tdsl index expressions over one kernel's size variables;
    `atoms`: compound sizes that are variables of their own (buffer_atoms)."""

    def __init__(self, names, atoms=None):
        self.atoms = {e: sympy.Symbol(n, integer=True, positive=True) for e, n in (atoms or {}).items()}
        self.vars = {n: tdsl.size_var(n, "int32") for n in sorted(set(names) | {a.name for a in self.atoms.values()})}
        # {name: value}: size variables that are constants in this kernel (a variant for
        # exactly those sizes: dispatch._variant); their dimensions are then numbers
        self.pinned = {}

    def dim(self, d):
        # an index expression already: the size variable of a kernel generic in its
        # channel count (erasure.py), beside the graph's symbolic sizes
        if isinstance(d, (int, tdsl.ir.expr.Expr)):
            return d
        e = sympy.sympify(d)
        if self.atoms:
            e = self.atoms.get(e) or e.subs(self.atoms)
        return self._expr(e)

    def shape(self, shape):
        return tuple(self.dim(d) for d in shape)

    def value(self, v):
        """An attribute value with every symbolic size in it converted (lists too)."""
        if isinstance(v, sympy.Expr):
            return self.dim(v)
        if isinstance(v, (list, tuple)):
            return type(v)(self.value(x) for x in v)
        return v

    def _expr(self, e):
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            return self.pinned.get(e.name, self.vars[e.name])
        if e.is_Add:
            out = None
            for a in e.args:
                t = self._expr(a)
                out = t if out is None else out + t
            return out
        if e.is_Mul:
            out = None
            for a in e.args:
                t = self._expr(a)
                out = t if out is None else out * t
            return out
        if e.is_Pow and e.exp.is_Integer and e.exp > 0:
            base = self._expr(e.base)
            out = base
            for _ in range(int(e.exp) - 1):
                out = out * base
            return out
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            if not den.is_Integer:
                raise NotImplementedError(f"size {e}: a division by a size variable")
            n, q = self._expr(sympy.expand(num)), int(den)
            if isinstance(e, sympy.ceiling):
                n = n + (q - 1)
            return tdsl.floordiv(n, q) if q != 1 else n
        if isinstance(e, sympy.Mod) and e.args[1].is_Integer:
            return tdsl.floormod(self._expr(e.args[0]), int(e.args[1]))
        if isinstance(e, (sympy.Min, sympy.Max)):
            f = tdsl.min if isinstance(e, sympy.Min) else tdsl.max
            out = None
            for a in e.args:
                t = self._expr(a)
                out = t if out is None else f(out, t)
            return out
        raise NotImplementedError(f"size {e} has no index expression")
