"""The epilogue of a blocked conv that stores a plain NCHW output, computed on whole vectors
of channels before the transposing store.

The blocked conv's register tile holds `xb` pixels x `cbb` vectors of `bn` channels. Into
an NCHW output each channel's `xb` pixels are one short row, so the inlined epilogue ran on
`xb`-lane vectors (3 or 4 pixels gathered from the tile). For a bias and a ReLU that is
the transposing store anyway; an exact GELU's erf there costs about as much as the conv
itself: four lanes of sixteen, and the blended erf of narrow vectors instead of the
AVX-512 table (codegen/llvm/erf_table.py). A conv alone (graph/passes/layout.py keeps it
out of a blocked chain) with such an epilogue computes it into a local tile of the conv's
own layout, pixels x channel vectors, and the store only transposes.
"""
from __future__ import annotations

from ....autosched.analysis import EXPENSIVE_CALLS
from ....ir import expr as E
from ....ir.visitor import walk
from ..stages import stages_of


def _expensive(t):
    calls = set()

    def f(n):
        if isinstance(n, E.Call):
            calls.add(n.name)
    for b in t.op.bodies:
        walk(b, f)
    return bool(calls & EXPENSIVE_CALLS)


def _wanted(out, conv, bn):
    """Whether the plain output `out` of conv stage `conv` gets its epilogue on channel
    vectors: an epilogue with a call whose vector form is a polynomial (EXPENSIVE_CALLS),
    channels a whole number of blocks, constant extents (the tile's layout is a constant
    relayout)."""
    if out is conv or any(not isinstance(d, E.IntImm) for d in out.shape) or out.shape[1].value % bn:
        return False
    return any(_expensive(t) for t in stages_of(out) if t is not conv and not t.op.reduce_axis)


def on_vectors(s, out, conv, info):
    """For a plain NCHW output `out` (not yet split) of the blocked conv stage `conv` whose
    epilogue is worth it (`_wanted`), the epilogue moved into a local stage laid out
    (N, C/bn, *spatial, bn) that `out` copies from, to be computed where the conv's tile
    is (`place`); else None. Not for the flattened plane's tile (`info["tile"]`), whose
    pixels span rows."""
    bn = info["bn"]
    if "tile" in info or not _wanted(out, conv, bn):
        return None
    ep = s.cache_write(out, "local")
    nd = len(out.shape)
    tile = s.transform_layout(ep, [out], [(d, None) for d in range(nd)] + [(1, bn)], scope="local")
    s[ep].compute_inline()
    return tile


def place(s, tile, out, at, xi):
    """Computes `tile` (on_vectors; nothing for None) at loop `at` of `out`, each pixel one
    vector of channels; `out`'s row of `xi` pixels per channel is then one short vector
    of the tile's column, stored whole."""
    if tile is None:
        return
    s[tile].compute_at(s[out], at)
    *_, c = s[tile].op.axis
    s[tile].vectorize(c)
    s[out].vectorize(xi)
