"""Range contexts of the analyses: a context (`Ctx`) maps the symbols of loop variables to
inclusive sympy bounds (lo, hi), which may be symbolic (`n - 1`). Contexts are interned, so
the analyses cache their results by (expression, context).
"""
from __future__ import annotations

CACHE_SIZE = 1 << 16    # entries of each analysis cache keyed by (expression, context)


class Ctx:
    """Interned, hashable map symbol -> (lo, hi) inclusive sympy bounds."""
    __slots__ = ("map", "key", "_hash", "level", "rounds")

    def __init__(self, key, mapping):
        self.key = key
        self.map = mapping
        self._hash = hash(key)
        self.level = _levels(mapping)
        self.rounds = tuple(range(max(self.level.values(), default=0) + 1))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return self is other

    def __repr__(self):
        return "Ctx(" + ", ".join(f"{k}: [{lo}, {hi}]" for k, (lo, hi) in self.map.items()) + ")"


def _levels(mapping):
    """Relaxation order: a variable that appears in the range of another one (a size n in
    io's range [0, (n+7)//8 - 1]) is relaxed only after it, so that a bound first keeps
    it symbolic and differences like 8*io + ii - n can cancel."""
    users = {q: [] for q in mapping}
    for v, (lo, hi) in mapping.items():
        # in the map's order, not a set's: on a cycle the levels depend on the order
        free = lo.free_symbols | hi.free_symbols
        for w in mapping:
            if w in free and w is not v:
                users[w].append(v)
    level = {}

    def lev(q, depth=0):
        r = level.get(q)
        if r is not None:
            return r
        if depth > len(mapping):          # a cycle: give up ordering
            return 0
        r = 0
        for u in users[q]:
            r = max(r, lev(u, depth + 1) + 1)
        level[q] = r
        return r

    for q in mapping:
        lev(q)
    return level


EMPTY = Ctx(frozenset(), {})
_ctx_table = {frozenset(): EMPTY}


def make_ctx(key, build):
    """The interned context for `key`; `build()` gives its map on first use."""
    c = _ctx_table.get(key)
    if c is None:
        c = Ctx(key, build())
        _ctx_table[key] = c
    return c
