"""The sizes of one call of a network with symbolic sizes: the size variables read from the
inputs' shapes and checked (`SizeBinder`), and the run states made for each distinct set of
sizes, the most recent few kept (`StatesBySize`).

A network imported with its batch or sequence left symbolic is built once: its kernels
take the sizes at call time, and its buffers depend on them, so each set of sizes gets
its own memory plan and run states (made on the first call at those sizes, from kernels
compiled at build: no compile on the request path).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Dict, Mapping

import sympy

from ..errors import GraphError
from .ir.dims import dim_str, evaluate, free_vars


class SizeBinder:
    """Reads the size variables of `params` (the network's inputs) from the shapes of one
    call's arrays; `bounds` {name: (low, high)} are checked."""

    def __init__(self, params, bounds=None):
        self.params = list(params)
        self.bounds = dict(bounds or {})
        self.where: Dict[str, list] = {}      # size variable -> [(input, axis)] that name it bare
        for p in self.params:
            for ax, d in enumerate(p.type.shape):
                if isinstance(d, sympy.Symbol):
                    self.where.setdefault(d.name, []).append((p.name, ax))
        self.names = sorted(self.where)
        missing = sorted(v.name for v in free_vars([p.type.shape for p in self.params]) if v.name not in self.where)
        if missing:
            raise GraphError(f"build: the size variables {missing} appear in the inputs' shapes only inside "
                             "expressions; an input axis must have each one as its size")

    def bind(self, shapes: Mapping[str, tuple]) -> Dict[str, int]:
        """{size variable: value} for the inputs' `shapes` ({input name: shape}); a rank
        that differs, two inputs that disagree on a size, a fixed axis of another size or
        a size outside its bounds is a GraphError naming the dimension and the inputs, and
        nothing runs."""
        sizes: Dict[str, int] = {}
        seen: Dict[str, tuple] = {}
        for p in self.params:
            shape = shapes.get(p.name)
            if shape is None:
                continue
            if len(shape) != len(p.type.shape):
                raise GraphError(f"input '{p.name}': expected rank {len(p.type.shape)} "
                                 f"({', '.join(map(dim_str, p.type.shape))}), got shape {tuple(shape)}")
            for ax, d in enumerate(p.type.shape):
                if isinstance(d, sympy.Symbol):
                    v = int(shape[ax])
                    if d.name in sizes and sizes[d.name] != v:
                        i0, a0 = seen[d.name]
                        raise GraphError(f"dimension '{d.name}' is {sizes[d.name]} in input '{i0}' (axis {a0}) "
                                         f"but {v} in input '{p.name}' (axis {ax})")
                    sizes[d.name] = v
                    seen.setdefault(d.name, (p.name, ax))
        for name, v in sizes.items():
            lo, hi = self.bounds.get(name, (1, None))
            if v < lo or hi is not None and v > hi:
                i0, a0 = seen[name]
                rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
                raise GraphError(f"dimension '{name}' = {v} (input '{i0}' axis {a0}) is outside its "
                                 f"bounds {rng}")
        for p in self.params:
            shape = shapes.get(p.name)
            if shape is None:
                continue
            for ax, d in enumerate(p.type.shape):
                if isinstance(d, sympy.Symbol):
                    continue
                if all(v.name in sizes for v in free_vars([d])) and evaluate(d, sizes) != int(shape[ax]):
                    raise GraphError(f"input '{p.name}': axis {ax} must be {dim_str(d)}"
                                     + (f" = {evaluate(d, sizes)}" if not isinstance(d, int) else "")
                                     + f", got {shape[ax]} (shape {tuple(shape)})")
        return sizes

    def key(self, sizes: Mapping[str, int]) -> tuple:
        return tuple(sizes[n] for n in self.names)


class StatesBySize:
    """{sizes: what `make(sizes)` made} for the `keep` most recently used sets of sizes."""

    def __init__(self, make: Callable, keep: int = 8):
        self._make = make
        self._keep = keep
        self._lock = threading.Lock()
        self._items: "OrderedDict[tuple, object]" = OrderedDict()
        self.made = 0

    def get(self, key: tuple, sizes: Dict[str, int]):
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                return item
        item = self._make(sizes)      # outside the lock: other sizes run meanwhile
        with self._lock:
            if key in self._items:    # another thread made it first
                return self._items[key]
            self._items[key] = item
            self.made += 1
            while len(self._items) > self._keep:
                self._items.popitem(last=False)
        return item

    def __len__(self):
        return len(self._items)
