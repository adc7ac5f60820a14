"""Tensor-expression definitions of the scatters (ir/ops_scatter.py) and of the gathers'
adjoints (ir/ops_grad.py: `take_grad`, `gather_elements_grad`), added to `topi.TE` on
import.

Each is Halide's scatter: a pure definition (a copy of the data, or zeros for an adjoint),
then one `tdsl.update` over the indices' domain that writes, or combines, each update at
the position its index names. Dimensions the indices do not choose are the update's pure
variables (the columns of an embedding's rows, the trailing dimensions of ScatterND): they
carry the parallelism and the vectors. The indices' own dimensions are reduction
variables, run in the indices' row-major order, so that without a reduction the last
update to a position wins, as onnxruntime applies them; a scatter without pure variables
stays serial, or, when it combines with an associative reduction, may be split into
partial results (the auto-scheduler's `rfactor`) or made atomic (on the GPU).

An index read from the data is checked at every write (`topi.checked_index`): negative
ones count from the end, one outside the axis raises tdsl.BoundsError after the call and
writes nothing."""
from __future__ import annotations

import inspect

import tdsl

from .topi import TE, c, checked_index, shape_of, uname

_COMBINE = {
    "none": lambda old, u: u,
    "add": lambda old, u: old + u,
    "mul": lambda old, u: old * u,
    "max": lambda old, u: tdsl.max(old, u),
    "min": lambda old, u: tdsl.min(old, u),
}


def _rows(shape, name):
    """Reduction variables over `shape`, outermost first, and the same as `axis=` wants
    them (the first innermost): the row-major order of the indices."""
    rax = [tdsl.reduce_axis((0, s), name=f"{name}{d}") for d, s in enumerate(shape)]
    return rax, list(reversed(rax))


def _with_params(names, fn):
    """fn(*args) as a function whose signature names `names`: tdsl.update takes its pure
    variables from the parameters of `index`, one per dimension it leaves to them."""
    def f(*args):
        return fn(*args)
    f.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])
    return f


def _scatter_update(base, pure_dims, rax_order, index_of, value_of, red):
    """tdsl.update of `base` with pure variables at `pure_dims` and reduction variables
    `rax_order` (axis= order): index_of(pure) -> the full index, value_of(pure) -> the
    update's value there, combined with the element by `red`."""
    names = [f"p{d}" for d in pure_dims]
    combine = _COMBINE[red]
    index = _with_params(names, lambda *p: index_of(p))
    value = _with_params(["old"] + names, lambda old, *p: combine(old, value_of(p)))
    return tdsl.update(base, index, value, axis=rax_order)


def _copy(x, name):
    return tdsl.compute(x.shape, lambda *i: x[i], name=uname(name))


def scatter_nd(ins, attrs, out):
    x, idx, upd = ins
    dims, ids = shape_of(x), shape_of(idx)
    q = ids[-1]
    rax, order = _rows(ids[:-1], "m")
    m = tuple(rax)
    pure_dims = list(range(q, len(dims)))

    def index_of(p):
        return tuple(checked_index(idx[m + (d,)], dims, d) for d in range(q)) + tuple(p)
    return _scatter_update(_copy(x, "scatter_nd"), pure_dims, order, index_of,
                           lambda p: upd[m + tuple(p)], attrs["reduction"])


def _elements(base, idx, upd, ax, red):
    """ScatterElements into `base`: dimension d off the axis is a pure variable where the
    indices span it, a reduction variable where they cover a part of it."""
    dims, ids = shape_of(base), shape_of(idx)
    pure_dims = [d for d in range(len(dims)) if d != ax and ids[d] == dims[d]]
    red_dims = [d for d in range(len(dims)) if d not in pure_dims]
    rax = {d: tdsl.reduce_axis((0, ids[d]), name=f"m{d}") for d in red_dims}

    def at(p):
        pv = dict(zip(pure_dims, p))
        return tuple(pv[d] if d in pv else rax[d] for d in range(len(dims)))

    def index_of(p):
        m = at(p)
        return tuple(checked_index(idx[m], dims, ax) if d == ax else m[d] for d in range(len(dims)))
    order = [rax[d] for d in reversed(red_dims)]
    return _scatter_update(base, pure_dims, order, index_of, lambda p: upd[at(p)], red)


def scatter_elements(ins, attrs, out):
    x, idx, upd = ins
    return _elements(_copy(x, "scatter_elements"), idx, upd, attrs["axis"], attrs["reduction"])


def _zeros(shape, dtype, name):
    return tdsl.compute(tuple(shape), lambda *i: c(0, dtype), name=uname(name))


def take_grad(ins, attrs, out):
    """out[.., idx[m], ..] += g[.., m, ..]: the rows an embedding read get their adjoint."""
    g, idx = ins
    ax, n = attrs["axis"], attrs["size"]
    gs, ids = shape_of(g), shape_of(idx)
    k = len(ids)
    dims = gs[:ax] + (n,) + gs[ax + k:]
    rax, order = _rows(ids, "m")
    m = tuple(rax)
    pure_dims = [d for d in range(len(dims)) if d != ax]

    def index_of(p):
        return tuple(p[:ax]) + (checked_index(idx[m], dims, ax),) + tuple(p[ax:])
    return _scatter_update(_zeros(dims, g.dtype, "take_grad"), pure_dims, order, index_of,
                           lambda p: g[tuple(p[:ax]) + m + tuple(p[ax:])], "add")


def gather_elements_grad(ins, attrs, out):
    """out[.., idx[i], ..] += g[i]: ScatterElements with reduction add into zeros."""
    g, idx = ins
    return _elements(_zeros(attrs["shape"], g.dtype, "gather_elements_grad"), idx, g,
                     attrs["axis"], "add")


TE["scatter_nd"] = scatter_nd
TE["scatter_elements"] = scatter_elements
TE["take_grad"] = take_grad
TE["gather_elements_grad"] = gather_elements_grad
