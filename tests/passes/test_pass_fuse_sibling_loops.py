"""fuse_sibling_loops alone: adjacent loops marked `fuse_siblings`, over one range and
independent, become one loop; dependent or unmarked neighbours are left alone."""
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.passes.fuse_siblings import PRAGMA, fuse_sibling_loops

from pass_ir import func, loop

MARK = ((PRAGMA, None),)
X, Y, Z = (S.Buffer(n, (E.const(16),), "float32") for n in "XYZ")


def _fill(buf, i, value):
    return S.BufferStore(buf, value, (i,))


def _siblings(reads_y=False, marked=True):
    """Y[i] = X[i] * 2 and Z[j] = X[j] + 1 (or Y[j] + 1, which depends on the first)."""
    i, j = E.Var("i"), E.Var("j")
    first = loop(i, 16, _fill(Y, i, E.BufferLoad(X, (i,)) * E.FloatImm(2.0)),
                 pragmas=MARK if marked else ())
    src = Y if reads_y else X
    second = loop(j, 16, _fill(Z, j, E.BufferLoad(src, (j,)) + E.FloatImm(1.0)),
                  pragmas=MARK if marked else ())
    return func([X, Y, Z], S.seq(first, second))


def test_independent_marked_siblings_become_one_loop():
    out = fuse_sibling_loops(_siblings())
    assert isinstance(out.body, S.For)
    assert [str(s) for s in out.body.body.stmts] == ["Y[i] = X[i] * 2.0f",
                                                     "Z[i] = X[i] + 1.0f"]


def test_dependent_siblings_are_left_alone():
    f = _siblings(reads_y=True)
    assert str(fuse_sibling_loops(f)) == str(f)


def test_unmarked_siblings_are_left_alone():
    f = _siblings(marked=False)
    assert str(fuse_sibling_loops(f)) == str(f)
