"""tdsl.arith: the index simplifier, bounds and proofs, checked against Python integers."""
import itertools
import random

import pytest

from tdsl import arith
from tdsl.arith import NotIndexExpr
from tdsl.ir import expr as E
from tdsl.ir.expr import IntImm, Var, Range
from tdsl.ir.stmt import Buffer


def R(lo, ext):
    return Range(E.convert(lo), E.convert(ext))


# ---------------------------------------------------------------------------------------
# a reference evaluator with Python integer semantics

def ev(e, env):
    t = type(e)
    if t is E.IntImm:
        return e.value
    if t is E.Var:
        return env[e]
    a = lambda: ev(e.a, env)      # noqa: E731
    b = lambda: ev(e.b, env)      # noqa: E731
    if t is E.Add:
        return a() + b()
    if t is E.Sub:
        return a() - b()
    if t is E.Mul:
        return a() * b()
    if t is E.FloorDiv:
        return a() // b()
    if t is E.FloorMod:
        return a() % b()
    if t is E.Min:
        return min(a(), b())
    if t is E.Max:
        return max(a(), b())
    if t is E.LT:
        return int(a() < b())
    if t is E.LE:
        return int(a() <= b())
    if t is E.GT:
        return int(a() > b())
    if t is E.GE:
        return int(a() >= b())
    if t is E.EQ:
        return int(a() == b())
    if t is E.NE:
        return int(a() != b())
    if t is E.And:
        return int(bool(a()) and bool(b()))
    if t is E.Or:
        return int(bool(a()) or bool(b()))
    if t is E.Not:
        return int(not ev(e.a, env))
    if t is E.Select:
        return ev(e.t, env) if ev(e.cond, env) else ev(e.f, env)
    if t is E.Cast:
        return ev(e.value, env)
    if t is E.Call and e.name == "likely":
        return ev(e.args[0], env)
    raise TypeError(f"cannot evaluate {t.__name__}")


def same(a, b):
    """Structural equality through the sympy forms."""
    return arith.to_sympy(a) == arith.to_sympy(b)


x, y, z = Var("x"), Var("y"), Var("z")
n = Var("n", nonneg=True)
m4 = Var("m", nonneg=True, multiple_of=4)


def _sample_env(rng, ranges, order=(z, y, x)):
    env = {n: rng.randint(0, 10), m4: 4 * rng.randint(0, 5)}
    for v in order:
        r = ranges.get(v)
        if r is None:
            env[v] = rng.randint(-20, 20)
        else:
            lo, ext = ev(r.min, env), ev(r.extent, env)
            if ext <= 0:
                return None          # an empty loop: nothing to check
            env[v] = rng.randint(lo, lo + ext - 1)
    return env


# ---------------------------------------------------------------------------------------
# fuzzing: random trees

_OPS = [E.Add, E.Sub, E.Mul, E.FloorDiv, E.FloorMod, E.Min, E.Max, E.Add, E.Mul,
        E.FloorDiv, E.FloorMod]


def _random_tree(rng, vs, depth):
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.6:
            return rng.choice(vs)
        return IntImm(rng.randint(-9, 9))
    op = rng.choice(_OPS)
    a = _random_tree(rng, vs, depth - 1)
    if op in (E.FloorDiv, E.FloorMod):
        if rng.random() < 0.8:
            return op(a, IntImm(rng.choice([2, 3, 4, 8, 16, -3, -4, 6, 5])))
        return op(a, _random_tree(rng, vs, depth - 1))
    if op is E.Mul and rng.random() < 0.6:
        return op(a, IntImm(rng.randint(-5, 8)))
    return op(a, _random_tree(rng, vs, depth - 1))


def _random_ranges(rng, structured=False):
    ranges = {}
    order = (z, y, x)
    for i, v in enumerate(order):
        if rng.random() < (0.85 if structured else 0.8):
            lo = rng.choice([0, 0, 0, 1, -3, 4]) if structured else rng.randint(-6, 6)
            ext = rng.choice([1, 2, 3, 4, 8, 16, 5]) if structured else rng.randint(1, 12)
            p = rng.random()
            if p < 0.15:
                ranges[v] = R(lo, E.Add(n, IntImm(ext)))            # symbolic extent
            elif p < 0.25 and structured:
                ranges[v] = R(0, E.FloorDiv(E.Add(m4, IntImm(3)), IntImm(4)))
            elif p < 0.4 and i > 0 and order[i - 1] in ranges:     # triangular
                w = order[i - 1]
                ranges[v] = Range(rng.choice([IntImm(lo), E.Mul(w, IntImm(2))]),
                                  E.Add(w, IntImm(ext)))
            elif p < 0.45:
                ranges[v] = Range(E.Mul(n, IntImm(4)), E.Sub(n, IntImm(ext)))
            else:
                ranges[v] = R(lo, ext)
    return ranges


def _check(rng, e, s, ranges, bnd=None, points=12):
    for _ in range(points):
        env = _sample_env(rng, ranges)
        if env is None:
            continue
        try:
            want = ev(e, env)
        except ZeroDivisionError:
            continue
        got = ev(s, env)
        names = {k.name: v for k, v in env.items()}
        assert got == want, f"{e}  ->  {s}  at {names}: {want} != {got}; ranges {ranges}"
        if bnd is not None:
            lo = None if bnd[0] is None else ev(bnd[0], env)
            hi = None if bnd[1] is None else ev(bnd[1], env)
            assert lo is None or lo <= want, f"bound {bnd} of {e} at {names}: {want}"
            assert hi is None or want <= hi, f"bound {bnd} of {e} at {names}: {want}"


def test_fuzz_random_trees():
    rng = random.Random(1234)
    vs = [x, y, z, n, m4]
    for _ in range(2500):
        ranges = _random_ranges(rng)
        e = _random_tree(rng, vs, rng.randint(1, 4))
        if rng.random() < 0.2:
            e = rng.choice([E.LT, E.LE, E.EQ, E.NE, E.GE, E.GT])(e, _random_tree(rng, vs, 2))
        _check(rng, e, arith.simplify(e, ranges), ranges)


def _index_like(rng, vs, depth):
    """Index expressions shaped like what splits, fuses and tiling produce."""
    def aff():
        e = IntImm(rng.randint(-8, 8))
        for v in rng.sample(vs, rng.randint(1, min(3, len(vs)))):
            c = IntImm(rng.choice([1, 1, 2, 4, 8, 16, -1, 3, 6]))
            e = E.Add(E.Mul(v, c), e) if rng.random() < 0.5 else E.Add(e, E.Mul(c, v))
        return e
    if depth == 0:
        return aff()
    k = rng.randint(0, 9)
    a = _index_like(rng, vs, depth - 1) if rng.random() < 0.5 else aff()
    c = IntImm(rng.choice([2, 4, 8, 16, 3, 6]))
    d = IntImm(rng.choice([2, 4, 3]))
    if k == 0:
        return E.FloorDiv(a, c)
    if k == 1:
        return E.FloorMod(a, c)
    if k == 2:
        return E.FloorMod(E.FloorDiv(a, c), d)
    if k == 3:
        return E.FloorDiv(E.FloorMod(a, IntImm(c.value * d.value)), c)
    if k == 4:
        return E.Add(E.Mul(E.FloorDiv(a, c), c), E.FloorMod(a, c))
    if k == 5:
        return E.Sub(a, E.Mul(E.FloorDiv(a, c), c))
    if k == 6:
        return rng.choice([E.Min, E.Max])(a, _index_like(rng, vs, depth - 1))
    if k == 7:
        return E.Add(E.Mul(E.FloorMod(E.FloorDiv(a, c), d), c), E.FloorMod(a, c))
    if k == 8:
        return E.Mul(a, rng.choice(vs))
    return E.Add(a, _index_like(rng, vs, depth - 1))


def test_fuzz_index_like_with_bounds():
    rng = random.Random(99)
    vs = [x, y, z, n, m4]
    for _ in range(900):
        ranges = _random_ranges(rng, structured=True)
        e = _index_like(rng, rng.sample(vs, 3), rng.randint(1, 3))
        if rng.random() < 0.25:
            e = rng.choice([E.LT, E.LE, E.EQ, E.NE, E.GE, E.GT])(e, _index_like(rng, vs, 0))
            _check(rng, e, arith.simplify(e, ranges), ranges)
        else:
            _check(rng, e, arith.simplify(e, ranges), ranges, arith.bound(e, ranges))


def _random_cond(rng, vs, depth):
    k = rng.random()
    if depth == 0 or k < 0.5:
        return rng.choice([E.LT, E.LE, E.EQ, E.NE, E.GE, E.GT])(
            _index_like(rng, vs, rng.randint(0, 1)), _index_like(rng, vs, 0))
    if k < 0.7:
        return E.And(_random_cond(rng, vs, depth - 1), _random_cond(rng, vs, depth - 1))
    if k < 0.9:
        return E.Or(_random_cond(rng, vs, depth - 1), _random_cond(rng, vs, depth - 1))
    return E.Not(_random_cond(rng, vs, depth - 1))


def test_fuzz_logic_selects_and_ranged_multiples():
    rng = random.Random(31)
    vs = [x, y, z, n]
    w = Var("w", multiple_of=4)
    for _ in range(300):
        ranges = _random_ranges(rng, structured=True)
        r = rng.random()
        if r < 0.4:
            e = _random_cond(rng, vs, 2)
        elif r < 0.7:
            e = E.Select(_random_cond(rng, vs, 1), _index_like(rng, vs, 1),
                         _index_like(rng, vs, 1))
        elif r < 0.8:
            e = E.Add(E.Cast("int32", _random_cond(rng, vs, 1)), x)
        else:   # a ranged variable that is also a multiple of 4
            ranges[w] = R(rng.choice([0, 4, -8]), rng.choice([1, 4, 9, 16]))
            e = _index_like(rng, [w, x, y], rng.randint(1, 3))
        s = arith.simplify(e, ranges)
        b = arith.bound(e, ranges) if e.dtype != "bool" else None
        for _ in range(10):
            env = _sample_env(rng, ranges)
            if env is None:
                continue
            if w in ranges:
                lo, ext = ranges[w].min.value, ranges[w].extent.value
                cands = [v for v in range(lo, lo + ext) if v % 4 == 0]
                if not cands:
                    continue
                env[w] = rng.choice(cands)
            else:
                env[w] = 4 * rng.randint(-3, 3)
            try:
                want = ev(e, env)
            except ZeroDivisionError:
                continue
            assert ev(s, env) == want, f"{e} -> {s} at {env}"
            if b is not None:
                assert b[0] is None or ev(b[0], env) <= want, (e, b, env)
                assert b[1] is None or want <= ev(b[1], env), (e, b, env)


def test_fuzz_can_prove_is_sound():
    rng = random.Random(7)
    vs = [x, y, z, n]
    proved = 0
    for _ in range(600):
        ranges = _random_ranges(rng, structured=True)
        c = rng.choice([E.LT, E.LE, E.GE, E.GT, E.EQ, E.NE])(
            _index_like(rng, vs, 1), _index_like(rng, vs, 0))
        if arith.can_prove(c, ranges):
            proved += 1
            for _ in range(12):
                env = _sample_env(rng, ranges)
                if env is not None:
                    assert ev(c, env) == 1, f"proved {c} under {ranges}, false at {env}"
    assert proved > 20


def test_bounds_exact_for_affine():
    rng = random.Random(5)
    for _ in range(300):
        vs = rng.sample([x, y, z], rng.randint(1, 3))
        ranges = {v: R(rng.randint(-5, 5), rng.randint(1, 6)) for v in vs}
        e = IntImm(rng.randint(-10, 10))
        for v in vs:
            e = E.Add(e, E.Mul(v, IntImm(rng.choice([-7, -2, -1, 1, 2, 3, 16]))))
        vals = []
        for pt in itertools.product(*[range(ranges[v].min.value,
                                            ranges[v].min.value + ranges[v].extent.value)
                                      for v in vs]):
            vals.append(ev(e, dict(zip(vs, pt))))
        lo, hi = arith.bound(e, ranges)
        assert (lo.value, hi.value) == (min(vals), max(vals)), e
        assert arith.const_bound(e, ranges) == (min(vals), max(vals))


def test_bounds_divmod_tight_when_in_one_block():
    assert tuple(b.value for b in arith.bound((x * 16 + y) // 16, {x: R(2, 3), y: R(0, 16)})) == (2, 4)
    lo, hi = arith.bound(y % 8, {y: R(16, 8)})
    assert (lo.value, hi.value) == (0, 7)
    lo, hi = arith.bound(y % 8, {y: R(17, 3)})
    assert (lo.value, hi.value) == (1, 3)
    lo, hi = arith.bound(E.Min(x, y), {x: R(0, 4), y: R(2, 10)})
    assert (lo.value, hi.value) == (0, 3)


# ---------------------------------------------------------------------------------------
# the bound() examples of the API

def test_bound_symbolic_free_var():
    io, ii = Var("io"), Var("ii")
    lo, hi = arith.bound(io * 8 + ii, {ii: R(0, 8)})
    assert same(lo, io * 8) and same(hi, io * 8 + 7)
    assert str(lo) == "io * 8" and str(hi) == "io * 8 + 7"


def test_bound_symbolic_extent():
    i = Var("i")
    lo, hi = arith.bound(i * 2 + 1, {i: R(0, n)})
    assert lo.value == 1
    assert same(hi, n * 2 - 1)


def test_bound_nested_ranges_relax_fully():
    i, j = Var("i"), Var("j")
    lo, hi = arith.bound(i + j, {i: R(0, 10), j: R(0, i + 1)})
    assert (lo.value, hi.value) == (0, 18)


def test_bound_product_sign_known_and_unknown():
    i, p = Var("i"), Var("p")
    lo, hi = arith.bound(i * n, {i: R(0, 4)})
    assert lo.value == 0 and same(hi, n * 3)
    lo, hi = arith.bound(i * p, {i: R(0, 4)})        # sign of p unknown: min/max
    assert isinstance(lo, E.Min) and isinstance(hi, E.Max)
    for pv in (-3, 0, 5):
        vals = [iv * pv for iv in range(4)]
        assert ev(lo, {p: pv}) == min(vals) and ev(hi, {p: pv}) == max(vals)


def test_bound_select_and_unknown_side():
    i = Var("i")
    lo, hi = arith.bound(E.Select(i < 2, i, i * 10), {i: R(0, 4)})
    assert (lo.value, hi.value) == (0, 30)
    lo, hi = arith.bound(x // y, {x: R(0, 4)})        # divisor of unknown sign
    assert lo is not None and hi is not None
    for yv in (-3, -1, 1, 2, 7):
        vals = [xv // yv for xv in range(4)]
        assert ev(lo, {y: yv}) <= min(vals) and ev(hi, {y: yv}) >= max(vals)


# ---------------------------------------------------------------------------------------
# the named rules

def test_constant_folding_floor_semantics():
    assert arith.simplify(E.FloorDiv(IntImm(-7), IntImm(2))).value == -4
    assert arith.simplify(E.FloorMod(IntImm(-7), IntImm(3))).value == 2
    assert arith.simplify(E.FloorMod(IntImm(7), IntImm(-3))).value == -2
    assert arith.simplify(E.FloorDiv(IntImm(7), IntImm(-2))).value == -4
    assert arith.simplify(E.Min(IntImm(3), IntImm(-1))).value == -1


def test_own_functions_not_sympy_mod():
    from tdsl.arith.symbolic import floordiv, floormod
    assert arith.to_sympy(x % 3).func is floormod
    assert arith.to_sympy(x // 3).func is floordiv
    # sympy's Mod gets Mod(x*y, x) style cases wrong for us: ours keeps floor semantics
    s = arith.to_sympy(E.FloorMod(x * 6 + 4, IntImm(-4)))
    for xv in range(-9, 9):
        assert ev(arith.from_sympy(s), {x: xv}) == (xv * 6 + 4) % -4


def test_divisible_terms_move_out():
    # (a*c + b)//c = a + b//c and (a*c + b) % c = b % c, with no ranges at all
    assert same(arith.simplify((x * 8 + y) // 8), x + y // 8)
    assert same(arith.simplify((x * 8 + y) % 8), y % 8)
    assert same(arith.simplify((x * 8 + y * 16 + 3) // 8), x + y * 2)          # 3//8 = 0
    assert same(arith.simplify((x * 8 + 17) // 8), x + 2)
    assert same(arith.simplify((x * 6 + 4) // 4), (x * 3 + 2) // 2)           # gcd rule


def test_small_numerator_vanishes_with_ranges():
    rng = {y: R(0, 8)}
    assert arith.simplify(y // 8, rng).value == 0
    assert arith.simplify(y % 8, rng) is y
    assert arith.simplify(y // 9, rng).value == 0
    assert not isinstance(arith.simplify(y // 4, rng), E.IntImm)
    io, ii = Var("io"), Var("ii")
    assert arith.simplify((io * 8 + ii) // 8, {ii: R(0, 8)}) is io
    assert arith.simplify((io * 8 + ii) % 8, {ii: R(0, 8)}) is ii
    assert same(arith.simplify((x * 4 + y) // 8, {y: R(0, 4)}), x // 2)         # c1 | c rule
    assert same(arith.simplify((x * 4 + y) % 8, {y: R(0, 4)}), x % 2 * 4 + y)


def test_split_fuse_recombination():
    f = Var("f")
    assert arith.simplify((f // 16) * 16 + f % 16) is f
    assert arith.simplify(f % 16 + 16 * (f // 16)) is f
    assert same(arith.simplify(((f // 4) % 4) * 4 + f % 4), f % 16)
    assert same(arith.simplify(f - (f // 8) * 8), f % 8)
    # split then fuse: i = io*8 + ii with io = g//8, ii = g%8
    g = Var("g")
    assert arith.simplify((g // 8) * 8 + g % 8, {g: R(0, 64)}) is g
    # fuse then split: fused = i*12 + j, split by 4 recovered through ranges
    fo, fi = Var("fo"), Var("fi")
    fused = fo * 4 + fi
    ranges = {fo: R(0, 30), fi: R(0, 4)}
    assert same(arith.simplify((fused // 12) * 12 + fused % 12, ranges), fused)


def test_split_fuse_recombination_with_symbolic_multiples():
    """The pairs rejoin when their coefficients hold symbols: the row index of a kernel of
    symbolic size S, fused over (batch, heads, row) and split back, is S*(f//S) + f%S
    times a multiple of S, and must fold to a multiple of f (no division per row)."""
    f, s = Var("f"), Var("S", nonneg=True)
    a = f // s
    cases = [
        (s * (f // s) + f % s, f),
        (s * s * (a // 4) * 4 + s * (f % s) + s * s * (a % 4), s * f),          # softmax rows
        (s * (a // 4) * 256 + s * (a % 4) * 64 + (f % s) * 64, f * 64),           # heads out
        (s * s * (f // 4) * 4 + s * s * (f % 4), s * s * f),                      # matmul tile
        (s * 8 * (a // 8) + s * (a % 8 // 2) * 2 + s * (a % 2), s * a),           # nested splits
        (x * s * (y // 4) * 4 + x * s * (y // 2 % 2) * 2 + x * s * (y % 2), x * s * y),
    ]
    rng = random.Random(7)
    for e, want in cases:
        got = arith.simplify(e, {f: R(0, s * s * 8)})
        assert same(got, want), (e, got)
        for _ in range(40):
            env = {s: rng.randint(1, 9), x: rng.randint(-5, 5), y: rng.randint(-30, 30)}
            env[f] = rng.randint(0, env[s] * env[s] * 8 - 1)
            assert ev(got, env) == ev(e, env), (e, got, env)
    # a pair of different multiples stays apart
    kept = arith.simplify(s * s * (f // s) + f % s)
    assert "f % S" in str(kept), kept


def test_nested_divmod():
    assert same(arith.simplify((x // 4) // 8), x // 32)
    assert same(arith.simplify((x % 32) // 8), (x // 8) % 4)
    assert same(arith.simplify((x % 16) % 4), x % 4)
    assert same(arith.simplify((x % 4) % 16), x % 4)
    assert arith.simplify((x % 4) // 4).value == 0
    assert arith.simplify(((x % 8) % 8) // 8).value == 0


def test_symbolic_divisor():
    i, j = Var("i"), Var("j")
    assert same(arith.simplify((i * n + j) // n), i + j // n)
    assert same(arith.simplify((i * n + j) % n), j % n)
    assert arith.simplify((i * n + j) // n, {j: R(0, n)}) is i
    assert arith.simplify((i * n + j) % n, {j: R(0, n)}) is j


def test_min_max_rules():
    i = Var("i")
    assert arith.simplify(E.Min(i, n - 1), {i: R(0, n)}) is i
    assert same(arith.simplify(E.Max(i, n - 1), {i: R(0, n)}), n - 1)
    assert same(arith.simplify(E.Min(x + 3, x + 1)), x + 1)
    io = Var("io")
    s = arith.simplify(E.Min(io * 8 + 8, n) - io * 8)
    assert same(s, E.Min(n - io * 8, IntImm(8)))


def test_floordiv_pairs_with_constant_offset():
    # (x + 15)//16 - x//16 is 0 or 1: ceil and floor of the same value are ordered
    assert same(arith.simplify(E.Min(x // 16, (x + 15) // 16)), x // 16)
    d = (x + 15) // 16 - x // 16
    assert same(arith.simplify(E.Max(d, IntImm(0))), d)
    assert arith.const_bound(d) == (0, 1)
    assert arith.const_bound((x + 32) // 16 - x // 16) == (2, 2)
    assert arith.simplify((x + 32) // 16 - x // 16).value == 2


def test_comparisons_fold_under_ranges():
    i = Var("i")
    rng = {i: R(0, 10)}
    t = arith.simplify(i < 10, rng)
    assert isinstance(t, E.IntImm) and t.dtype == "bool" and t.value == 1
    assert arith.simplify(i >= 10, rng).value == 0
    assert arith.simplify(E.EQ(i, IntImm(12)), rng).value == 0
    assert arith.simplify(E.NE(i, IntImm(-1)), rng).value == 1
    c = arith.simplify(i < 5, rng)
    assert isinstance(c, E.LT)
    assert arith.simplify(E.And(i < 10, i < 5), rng) is not None
    assert arith.simplify(E.Or(i < 10, x < 5), rng).value == 1
    assert arith.simplify(E.Not(i < 10), rng).value == 0
    # normalisation: gcd of coefficients, constants to one side
    assert same(arith.simplify(x * 4 < 7), x < 2)
    assert same(arith.simplify(x + 1 <= y + 1), x < y + 1)
    assert arith.simplify(E.EQ(x * 2, IntImm(3))).value == 0


def test_guard_with_multiple_of():
    io, ii = Var("io"), Var("ii")
    n8 = Var("n8", nonneg=True, multiple_of=8)
    rng = {io: R(0, arith.ceil_div(n8, 8)), ii: R(0, 8)}
    assert arith.can_prove(io * 8 + ii < n8, rng)
    assert arith.simplify(E.likely(io * 8 + ii < n8), rng).value == 1
    rng = {io: R(0, arith.ceil_div(n, 8)), ii: R(0, 8)}
    assert not arith.can_prove(io * 8 + ii < n, rng)      # a real tail: not provable
    g = arith.simplify(E.likely(io * 8 + ii < n), rng)
    assert isinstance(g, E.Call) and g.name == "likely"


def test_guard_with_size_range_kept_symbolic():
    # a size with a huge numeric range must not spoil the cancellation of n
    i = Var("i")
    rng = {n: R(0, 2**31 - 1), i: R(0, n)}
    assert arith.can_prove(i < n, rng)
    assert arith.simplify(E.Min(i, n - 1), rng) is i


def test_multiple_of_facts():
    assert arith.is_divisible(m4 * 3 + 8, 4)
    assert not arith.is_divisible(m4 * 3 + 6, 4)
    assert not arith.is_divisible(n * 3, 4)
    assert arith.simplify(m4 % 4).value == 0
    assert same(arith.simplify((m4 + 3) // 4), m4 // 4)
    assert str(arith.simplify(m4 * 2 + 4)) == "m * 2 + 4"
    assert arith.is_divisible(x * 8 + 4, 4)
    assert arith.is_divisible(x * n, n)
    assert arith.is_divisible(y, 4, {y: R(8, 1)})


def test_can_prove_is_conservative():
    assert not arith.can_prove(x < 5)
    assert not arith.can_prove(x * x >= 1)
    assert arith.can_prove(x * x >= 0) or True     # allowed either way, must not raise
    assert arith.can_prove(n >= 0)
    assert arith.can_prove(True) and not arith.can_prove(False)


def test_equal():
    assert arith.equal(x * 2 + x, x * 3)
    assert not arith.equal(x, y)
    assert arith.equal((x * 8 + y) // 8, x, {y: R(0, 8)})


def test_linear_coeff():
    jo, ji = Var("jo"), Var("ji")
    rng = {ji: R(0, 16)}
    c, base = arith.linear_coeff((jo * 16 + ji) // 16, ji, rng)
    assert c == 0 and base is jo
    c, base = arith.linear_coeff(jo * 64 + ji * 4 + 3, ji)
    assert c == 4 and same(base, jo * 64 + 3)
    c, base = arith.linear_coeff((jo * 16 + ji) % 16 + jo * 32, ji, rng)
    assert c == 1 and same(base, jo * 32)
    assert arith.linear_coeff(jo * 16 + ji, Var("other")) [0] == 0
    assert arith.linear_coeff(ji * ji, ji) is None
    assert arith.linear_coeff(ji // 2, ji) is None
    assert arith.linear_coeff(ji % 4, ji) is None
    assert arith.linear_coeff(ji % 16, ji, rng)[0] == 1
    assert arith.linear_coeff(ji * n + 1, ji) is None          # symbolic coefficient
    buf = Buffer("A", (IntImm(16),), "int32")
    assert arith.linear_coeff(E.BufferLoad(buf, (ji,)), ji) is None


def test_ceil_div():
    assert arith.ceil_div(10, 4).value == 3
    assert arith.ceil_div(-10, 4).value == -2
    assert arith.ceil_div(IntImm(8), 4).value == 2
    cd = arith.ceil_div(n, 8)
    for nv in range(0, 30):
        assert ev(cd, {n: nv}) == -(-nv // 8)
    assert same(arith.ceil_div(m4, 4), m4 // 4)
    assert arith.ceil_div(n, 1) is n


def test_non_integer_expressions_keep_structure():
    buf = Buffer("A", (IntImm(64),), "float32")
    io, ii = Var("io"), Var("ii")
    load = E.BufferLoad(buf, ((io * 8 + ii) // 8 * 8 + (io * 8 + ii) % 8,))
    e = E.Add(E.Mul(load, E.FloatImm(2.0)), E.FloatImm(1.0))
    s = arith.simplify(e, {ii: R(0, 8)})
    assert isinstance(s, E.Add) and isinstance(s.a, E.Mul)
    assert s.b is e.b and s.a.b is e.a.b                       # float parts untouched
    assert same(s.a.a.indices[0], io * 8 + ii)
    sel = E.Select(ii < 8, load, E.FloatImm(0.0))
    assert isinstance(arith.simplify(sel, {ii: R(0, 8)}), E.BufferLoad)
    # integer expression holding a load: the load index is still simplified
    ibuf = Buffer("I", (IntImm(64),), "int32")
    e2 = E.Add(E.BufferLoad(ibuf, ((x * 4 + y) // 4,)), IntImm(1))
    s2 = arith.simplify(e2, {y: R(0, 4)})
    assert s2.a.indices[0] is x
    with pytest.raises(NotIndexExpr):
        arith.to_sympy(load)
    with pytest.raises(NotIndexExpr):
        arith.bound(E.FloatImm(1.0))
    f = Var("f", "float32")
    assert arith.simplify(f + f) is not None


def test_likely_is_kept_unless_proven():
    i = Var("i")
    g = E.likely(i < n)
    s = arith.simplify(g, {i: R(0, n + 1)})
    assert isinstance(s, E.Call) and s.name == "likely"
    assert arith.simplify(g, {i: R(0, n)}).value == 1
    c = E.And(E.likely(i < n), x < 3)
    s = arith.simplify(c, {i: R(0, n)})
    assert same(s, x < 3)


def test_round_trip_and_printing():
    e = E.Min(x // 4, E.Max(y % 3, x * 4 + y))
    s = arith.to_sympy(e)
    back = arith.from_sympy(s)
    assert same(back, e)
    assert isinstance(back, E.Min)
    assert str(arith.simplify(4 * x + y)) == "x * 4 + y"
    assert str(arith.simplify(y + x * 4 - 1)) == "x * 4 + y - 1"


def test_dtypes_preserved():
    a = Var("a", "int64")
    s = arith.simplify(a * 2 + a)
    assert s.dtype == "int64"
    assert arith.simplify(E.Add(a, IntImm(0, "int64"))) is a
    c = arith.simplify(a < IntImm(3, "int64"))
    assert c.dtype == "bool" and c.a.dtype == "int64"


def test_unchanged_expression_keeps_identity():
    e = x * 4 + y
    assert arith.simplify(e) is e
    assert arith.simplify(x) is x


def _gemm_index(io, ii, jo, ji):
    return (io * 8 + ii) * 1024 + (jo * 16 + ji) // 16 * 16 + (jo * 16 + ji) % 16


def test_warm_calls_skip_sympy(monkeypatch):
    """Results are cached by structure and ranges: a rebuilt expression with rebuilt
    ranges (what every lower() does) never reaches sympy again. (Speed itself is
    measured in bench/, not asserted here.)"""
    from tdsl.arith import analysis, convert
    io, ii, jo, ji = Var("io"), Var("ii"), Var("jo"), Var("ji")

    def ranges():
        return {ii: R(0, 8), ji: R(0, 16), io: R(0, arith.ceil_div(n, 8)), jo: R(0, 64)}
    s = arith.simplify(_gemm_index(io, ii, jo, ji), ranges())
    assert same(s, io * 8192 + ii * 1024 + jo * 16 + ji)
    b = arith.bound(_gemm_index(io, ii, jo, ji), ranges())

    def boom(*a, **k):
        raise AssertionError("sympy reached on a warm call")
    monkeypatch.setattr(analysis, "simp", boom)
    monkeypatch.setattr(analysis, "sbound", boom)
    monkeypatch.setattr(convert, "_build", boom)
    s2 = arith.simplify(_gemm_index(io, ii, jo, ji), ranges())
    assert same(s2, s)
    b2 = arith.bound(_gemm_index(io, ii, jo, ji), ranges())
    assert b2 == b
    # an unrelated extra range does not spoil the cache key
    more = ranges()
    more[Var("unused")] = R(0, 3)
    assert same(arith.simplify(_gemm_index(io, ii, jo, ji), more), s)


def test_floor_against_its_numerator():
    # a run-time extent rounded up to a split factor is at least the extent: the bounds of
    # a split loop with a guarded tail (and of the buffers it reads) stay one expression
    up = (x + 63) // 64 * 64
    assert same(arith.simplify(E.Max(up, x)), up)
    assert same(arith.simplify(E.Max((E.Max(up, x) + 15) // 16 * 16, up)), up)
    assert arith.const_bound(up - x) == (0, 63)
    assert arith.const_bound(x - up) == (-63, 0)
    assert arith.const_bound(x // 8 * 16 - x * 2) == (-14, 0)
    # ranges that bound the terms closer still do
    i = Var("i")
    assert arith.const_bound(i // 16 * 16 - i, {i: R(0, 4)}) == (-3, 0)
