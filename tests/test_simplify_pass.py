"""The statement-level simplify pass on small hand-built loop nests."""
import os
import sys

from tdsl import arith
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.ir.expr import IntImm, Var, Range
from tdsl.ir.stmt import Buffer, BufferStore, For, ForKind, IfThenElse, LetStmt, SeqStmt
from tdsl.passes.simplify import simplify_stmt, simplify_func


sys.path.insert(0, os.path.dirname(__file__))   # the evaluator of test_arith


def c(v):
    return IntImm(v)


A = Buffer("A", (c(64),), "float32")
B = Buffer("B", (c(64),), "float32")


def store(idx, value=None):
    return BufferStore(A, E.FloatImm(1.0) if value is None else value, (idx,))


def loop(v, ext, body, kind=ForKind.SERIAL, lo=0, tag=""):
    return For(v, E.convert(lo), E.convert(ext), kind, body, tag)


def same(a, b):
    return arith.to_sympy(a) == arith.to_sympy(b)


def test_indices_simplified_with_loop_ranges():
    io, ii = Var("io"), Var("ii")
    idx = (io * 8 + ii) // 8 * 8 + (io * 8 + ii) % 8
    load = E.BufferLoad(B, ((io * 8 + ii) % 8,))
    s = loop(io, 8, loop(ii, 8, store(idx, E.Mul(load, E.FloatImm(2.0)))))
    out = simplify_stmt(s)
    st = out.body.body
    assert isinstance(st, BufferStore)
    assert same(st.indices[0], io * 8 + ii)
    assert st.value.a.indices[0] is ii                   # load index, inside float math
    assert isinstance(st.value, E.Mul) and st.value.b is s.body.body.value.b


def test_proven_guards_are_removed():
    io, ii = Var("io"), Var("ii")
    n8 = Var("n8", nonneg=True, multiple_of=8)
    body = IfThenElse(E.likely(io * 8 + ii < n8), store(ii))
    s = loop(io, arith.ceil_div(n8, 8), loop(ii, 8, body))
    out = simplify_stmt(s)
    assert isinstance(out.body.body, BufferStore)        # the if is gone
    assert same(out.extent, n8 // 8)
    # the same guard with a real tail stays, hint included
    n = Var("n", nonneg=True)
    s = loop(io, arith.ceil_div(n, 8), loop(ii, 8, IfThenElse(E.likely(io * 8 + ii < n), store(ii))))
    g = simplify_stmt(s).body.body
    assert isinstance(g, IfThenElse) and isinstance(g.cond, E.Call) and g.cond.name == "likely"


def test_false_guard_takes_else_branch_or_vanishes():
    i = Var("i")
    other = store(i + 1)
    s = loop(i, 4, IfThenElse(i >= 4, store(i), other))
    out = simplify_stmt(s)
    assert isinstance(out.body, BufferStore) and same(out.body.indices[0], i + 1)
    s = loop(i, 4, SeqStmt((IfThenElse(i > 10, store(i)), store(i))))
    out = simplify_stmt(s)
    assert isinstance(out.body, BufferStore)


def test_then_branch_removed_keeps_negated_else():
    i = Var("i")
    j = Var("j")
    s = loop(i, 4, IfThenElse(j < 3, loop(Var("k"), 0, store(i)), store(i)))
    out = simplify_stmt(s)
    assert isinstance(out.body, IfThenElse)
    assert out.body.else_case is None
    assert arith.can_prove(E.EQ(E.Select(out.body.cond, c(1), c(0)),
                                E.Select(j >= 3, c(1), c(0))))


def test_zero_and_one_extent_loops():
    i, j = Var("i"), Var("j")
    s = SeqStmt((loop(i, 0, store(i)), loop(j, 1, store(j * 2 + 1), lo=5)))
    out = simplify_stmt(s)
    assert isinstance(out, BufferStore)
    assert out.indices[0].value == 11
    n = Var("n", nonneg=True)
    s = loop(i, n - n, store(i))                         # extent provably 0
    assert simplify_stmt(s).stmts == ()
    # negative extent: nothing runs
    assert simplify_stmt(loop(i, -3, store(i))).stmts == ()
    # a thread binding of extent 1 stays (the launch needs it)
    t = Var("threadIdx.x")
    s = loop(t, 1, store(t), kind=ForKind.THREAD_BINDING, tag="threadIdx.x")
    out = simplify_stmt(s)
    assert isinstance(out, For) and out.kind is ForKind.THREAD_BINDING


def test_seq_flattening():
    i = Var("i")
    inner = SeqStmt((store(i), SeqStmt((store(i + 1), store(i + 2)))))
    s = loop(i, 4, SeqStmt((inner, SeqStmt(()), store(i + 3))))
    out = simplify_stmt(s)
    assert isinstance(out.body, SeqStmt)
    assert len(out.body.stmts) == 4
    assert all(isinstance(x, BufferStore) for x in out.body.stmts)


def test_loop_bounds_simplified():
    i = Var("i")
    m = Var("m", nonneg=True, multiple_of=16)
    s = loop(i, (m + 15) // 16 * 16, store(i), lo=c(2) - c(2))
    out = simplify_stmt(s)
    assert same(out.extent, m) and out.min.value == 0


def test_let_values_used_for_proofs_not_substituted():
    io, ii = Var("io"), Var("ii")
    t = Var("t")
    n8 = Var("n8", nonneg=True, multiple_of=8)
    body = LetStmt(t, io * 8 + ii, IfThenElse(t < n8, store(t % 64)))
    s = loop(io, n8 // 8, loop(ii, 8, body))
    out = simplify_stmt(s)
    let = out.body.body
    assert isinstance(let, LetStmt) and let.var is t
    assert isinstance(let.body, BufferStore)             # guard proven through the let
    assert same(let.body.indices[0], t % 64)             # the name is kept in indices
    # the let's value bounds its variable: t // 8 with t in [0, 8) folds to 0, and the
    # then unused let goes away
    body = LetStmt(t, ii + 0, store(t // 8))
    out = simplify_stmt(loop(ii, 8, body))
    assert isinstance(out.body, BufferStore) and out.body.indices[0].value == 0


def test_unused_let_dropped():
    i, t = Var("i"), Var("t")
    s = loop(i, 4, LetStmt(t, i * 2, store(i)))
    out = simplify_stmt(s)
    assert isinstance(out.body, BufferStore)


def test_select_conditions_and_values():
    i = Var("i")
    v = E.Select(i < 8, E.BufferLoad(B, (i,)), E.FloatImm(0.0))
    out = simplify_stmt(loop(i, 8, store(i, v)))
    assert isinstance(out.body.value, E.BufferLoad)
    v = E.Select(i < 4, E.BufferLoad(B, (i,)), E.FloatImm(0.0))
    out = simplify_stmt(loop(i, 8, store(i, v)))
    assert isinstance(out.body.value, E.Select)


def test_pure_and_identity_preserving():
    i, j = Var("i"), Var("j")
    s = loop(i, 4, loop(j, 8, store(i * 8 + j)))
    before = str(s)
    out = simplify_stmt(s)
    assert out is s                                      # nothing to do: same object
    assert str(s) == before
    s2 = loop(i, 4, store(E.Add(i, E.Mul(c(0), j))))
    before2 = str(s2)
    out2 = simplify_stmt(s2)
    assert out2 is not s2 and str(s2) == before2       # the input is not modified
    assert out2.body.indices[0] is i


def test_outer_ranges_argument_and_simplify_func():
    i = Var("i")
    n = Var("n", nonneg=True)
    s = IfThenElse(i < n, store(i))
    assert isinstance(simplify_stmt(s, {i: Range(c(0), n)}), BufferStore)
    f = S.PrimFunc("f", [A, n], loop(i, n, IfThenElse(E.Min(i, n - 1) < n, store(i))))
    f.attrs["size_ranges"] = {n: Range(c(0), c(2**31 - 1))}
    g = simplify_func(f)
    assert g is not f and f.body.body.__class__ is IfThenElse
    assert isinstance(g.body.body, BufferStore)
    assert g.name == "f" and g.params == f.params


def test_vectorized_loop_with_tail_guard_is_kept():
    i, v = Var("i"), Var("v")
    n = Var("n", nonneg=True)
    s = loop(i, arith.ceil_div(n, 16),
             loop(v, 16, IfThenElse(E.likely(i * 16 + v < n), store(v)), kind=ForKind.VECTORIZED))
    out = simplify_stmt(s)
    assert out.body.kind is ForKind.VECTORIZED
    assert isinstance(out.body.body, IfThenElse)


def test_conjuncts_use_earlier_facts_and_then_branch_ranges():
    jo, ji = Var("jo"), Var("ji")
    # the second conjunct follows from the first: dropped
    cond = E.And(E.likely(jo * 16 + ji < 40), E.likely(jo < 3))
    out = simplify_stmt(loop(jo, 4, loop(ji, 16, IfThenElse(cond, store(ji)))))
    g = out.body.body
    assert isinstance(g, IfThenElse) and isinstance(g.cond, E.Call)
    assert same(g.cond.args[0], jo * 16 + ji < 40)
    # independent conjuncts both stay; contradictory ones fold the if away
    cond = E.And(jo < 3, ji < 5)
    g = simplify_stmt(loop(jo, 4, loop(ji, 16, IfThenElse(cond, store(ji))))).body.body
    assert isinstance(g.cond, E.And)
    cond = E.And(jo < 2, jo > 2)
    out = simplify_stmt(loop(jo, 4, IfThenElse(cond, store(jo), store(jo + 1))))
    assert isinstance(out.body, BufferStore) and same(out.body.indices[0], jo + 1)
    # inside the branch the loop variable is known to be smaller: nested guard and min go
    i = Var("i")
    n = Var("n", nonneg=True)
    inner = IfThenElse(i < n + 5, store(E.Min(i, n - 1)))
    out = simplify_stmt(loop(i, 100, IfThenElse(i < n, inner)))
    st = out.body.then_case
    assert isinstance(st, BufferStore) and st.indices[0] is i


# ---------------------------------------------------------------------------------------
# random loop nests, run by a small interpreter before and after the pass

def _run(stmt, env, out):
    t = type(stmt)
    if t is SeqStmt:
        for x in stmt.stmts:
            _run(x, env, out)
    elif t is For:
        lo = _ev(stmt.min, env)
        for v in range(lo, lo + _ev(stmt.extent, env)):
            env[stmt.var] = v
            _run(stmt.body, env, out)
        env.pop(stmt.var, None)
    elif t is IfThenElse:
        if _ev(stmt.cond, env):
            _run(stmt.then_case, env, out)
        elif stmt.else_case is not None:
            _run(stmt.else_case, env, out)
    elif t is LetStmt:
        env[stmt.var] = _ev(stmt.value, env)
        _run(stmt.body, env, out)
    elif t is BufferStore:
        out.append((tuple(_ev(i, env) for i in stmt.indices), _ev(stmt.value, env)))
    else:
        raise TypeError(t)


def _ev(e, env):
    from test_arith import ev
    return ev(e, env)


def _random_nest(rng, n):
    import test_arith as TA
    vs = [Var(f"l{k}") for k in range(3)]
    depth = rng.randint(1, 3)
    loops = vs[:depth]

    def body(level, avail):
        stmts = []
        for _ in range(rng.randint(1, 2)):
            r = rng.random()
            pool = avail + [n]
            if r < 0.45:
                stmts.append(BufferStore(Buffer("I", (c(1),), "int32"), TA._index_like(rng, pool, 1),
                                         (TA._index_like(rng, pool, 1),)))
            elif r < 0.8:
                cnd = TA._random_cond(rng, pool, 1)
                if rng.random() < 0.5:
                    cnd = E.likely(cnd)
                stmts.append(IfThenElse(cnd, body(level, avail),
                                        body(level, avail) if rng.random() < 0.3 else None))
            else:
                t = Var("t")
                stmts.append(LetStmt(t, TA._index_like(rng, pool, 1), body(level, avail + [t])))
        return stmts[0] if len(stmts) == 1 else SeqStmt(tuple(stmts))

    def nest(k):
        if k == len(loops):
            return body(k, loops)
        v = loops[k]
        ext = rng.choice([c(1), c(3), c(4), c(0), E.Add(n, c(1)),
                          E.FloorDiv(E.Add(n, c(3)), c(4))])
        lo = rng.choice([c(0), c(0), c(2), loops[k - 1] if k else c(1)])
        return For(v, lo, ext, ForKind.SERIAL, nest(k + 1))
    return nest(0)


def test_fuzz_pass_preserves_behaviour():
    import random
    rng = random.Random(11)
    n = Var("n", nonneg=True)
    for _ in range(70):
        s = _random_nest(rng, n)
        out = simplify_stmt(s)
        for nv in (0, 1, 6):
            want, got = [], []
            try:
                _run(s, {n: nv}, want)
            except ZeroDivisionError:
                continue
            _run(out, {n: nv}, got)
            assert got == want, f"n={nv}\n{s}\n--->\n{out}"
