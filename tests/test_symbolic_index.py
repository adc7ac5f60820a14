"""Index arithmetic of kernels of run-time sizes (issue: networks of any size). A function
with integer scalar parameters adds and multiplies its buffer indices in 64 bits, so the
register tile of a kernel whose offsets hold a run-time term loads at constant
displacements from one base, as the static kernel does, instead of recomputing and
sign-extending a 32-bit index per broadcast. Results are compared with numpy."""
import re

import numpy as np

import tdsl


def _tile_kernel(n):
    """out[b, p, c] = sum_k x[b, p, k] * w[k, c]: a serial loop over the batch around a
    parallel loop of (pixel block, channel block), each a 14-pixel x 16-channel register
    tile accumulated over k: the shape of efficientnet_b0's 1x1 projections."""
    x = tdsl.placeholder((n, 56, 48), name="x")
    w = tdsl.placeholder((48, 32), name="w")
    k = tdsl.reduce_axis((0, 48), "k")
    y = tdsl.compute((n, 56, 32), lambda b, p, c: tdsl.sum(x[b, p, k] * w[k, c], axis=k),
                     name="y")
    s = tdsl.create_schedule(y)
    yl = s.cache_write(y, "local")
    _, p, c = s[y].op.axis
    po, pi = s[y].split(p, 14)
    co, ci = s[y].split(c, 16)
    s[y].reorder(po, co, pi, ci)
    fused = s[y].fuse(po, co)
    s[y].parallel(fused)
    s[y].vectorize(ci)
    s[yl].compute_at(s[y], fused)
    lb, lp, lc = s[yl].op.axis
    (kk,) = s[yl].op.reduce_axis
    s[yl].reorder(kk, lb, lp, lc)
    s[yl].unroll(lp)
    s[yl].vectorize(lc)
    return s, [x, w, y]


def _blocks(ir_text):
    """{label: body} of every basic block of optimised LLVM IR."""
    out, name = {}, None
    for line in ir_text.splitlines():
        m = re.match(r"^([\w.$-]+):", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name is not None and line.startswith("  "):
            out[name].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def _multiply_loops(ir_text):
    """The bodies of the single-block loops (a block that branches to itself) that
    multiply floats: the register tile's reduction loop."""
    return [body for name, body in _blocks(ir_text).items()
            if re.search(rf"label %{re.escape(name)}\b", body) and " fmul " in body]


def test_symbolic_register_tile_loads_without_sign_extension():
    """With the batch a run-time size, the tile's input offset is `b * 2688 + f // 2 * 672
    + p * 48 + k`; computed in i32 and extended at the end, LLVM recomputed and
    sign-extended it per broadcast (13 extensions per 14 multiplies). In 64 bits the loop
    loads at constant displacements from one pointer."""
    s, args = _tile_kernel(tdsl.size_var("n"))
    f = tdsl.build(s, args, target="llvm")
    loops = _multiply_loops(f.get_source())
    assert loops, f.get_source()
    for body in loops:
        assert body.count(" fmul ") == 14, body
        assert " sext " not in body, body
    rng = np.random.default_rng(0)
    wv = rng.standard_normal((48, 32)).astype(np.float32)
    for n in (1, 3, 5):
        xv = rng.standard_normal((n, 56, 48)).astype(np.float32)
        out = np.zeros((n, 56, 32), np.float32)
        f(xv, wv, out)
        np.testing.assert_allclose(out, xv @ wv, rtol=1e-4, atol=1e-4)


def test_index_width_follows_the_run_time_sizes():
    """Only a function of run-time sizes computes its indices in 64 bits: the static
    kernel's generated code is what it was (its index arithmetic stays i32)."""
    s, args = _tile_kernel(tdsl.size_var("n"))
    symbolic = tdsl.build(s, args, target="llvm").get_source("ll-unopt")
    s, args = _tile_kernel(3)
    static = tdsl.build(s, args, target="llvm").get_source("ll-unopt")
    assert re.search(r"mul nsw i64 %\S+, 2688", symbolic), symbolic
    assert not re.search(r"(add|mul) nsw i64", static), static
    assert re.search(r"mul nsw i32 %\S+, 672", static), static


def test_symbolic_kernel_addresses_buffers_over_2_gib():
    """Offsets past 2^31 elements (and bytes) of an int8 buffer whose rows are each under
    2^31: the row term `b * 2^30` is a 64-bit product, so rows 2 and 3 are read where
    they are. Only the touched pages of the 4 GiB input are ever committed."""
    n = tdsl.size_var("n")
    row = 2 ** 30
    x = tdsl.placeholder((n, row), name="x", dtype="int8")
    y = tdsl.compute((n,), lambda b: x[b, row - 1] + x[b, 0], name="y")
    f = tdsl.build(tdsl.create_schedule(y), [x, y], target="llvm")
    xv = np.empty((4, row), np.int8)
    xv[:, 0] = [1, 2, 3, 4]
    xv[:, -1] = [10, 20, 30, 40]
    out = np.zeros(4, np.int8)
    f(xv, out)
    np.testing.assert_array_equal(out, xv[:, -1] + xv[:, 0])
