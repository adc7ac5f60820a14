"""bounds_check alone (the "build" pass): an access whose index is read from memory is
guarded, its failure recorded in a buffer appended to the parameters; with
`data_only=False` every access the loop ranges do not prove inside, a vector loop versioned
into a fast and a checked copy; what needs no check is returned as it is."""
import tdsl
from tdsl.ir import stmt as S
from tdsl.passes.bounds_check import RECORD_NAME, Check, bounds_check

from pass_ir import before, nodes


def _gather():
    A = tdsl.placeholder((16,), name="A")
    idx = tdsl.placeholder((4,), name="idx", dtype="int32")
    B = tdsl.compute((4,), lambda i: A[idx[i]] * 2.0, name="B")
    return before("bounds_check", tdsl.create_schedule(B), [A, idx, B], target="llvm")


def _shifted(n, factor, vectorize=False):
    A = tdsl.placeholder((16,), name="A")
    B = tdsl.compute((n,), lambda i: A[i + 16 - n] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    _, ii = s[B].split(B.op.axis[0], factor=factor)
    if vectorize:
        s[B].vectorize(ii)
    return before("bounds_check", s, [A, B], target="llvm")


def test_index_read_from_memory_is_checked():
    f = _gather()
    out = bounds_check(f, data_only=True)
    rec = out.params[-1]
    assert rec.name == RECORD_NAME and [str(d) for d in rec.shape] == ["3"]
    assert out.params[:-1] == f.params and out.attrs["bounds_record"] is rec
    assert out.attrs["bounds_checks"] == [Check("main", "A", "load")]
    text = str(out)
    assert "B[i] = select(int64(idx[i]) >= int64(0) and int64(idx[i]) < int64(16), " \
        "A[idx[i]], 0.0f) * 2.0f" in text
    assert "if not (int64(idx[i]) >= int64(0) and int64(idx[i]) < int64(16)):" in text
    assert bounds_check(out, data_only=False) is out           # checked once


def test_affine_accesses_are_not_checked_for_data():
    f = _shifted(10, 4)
    assert bounds_check(f, data_only=True) is f


def test_every_access_checked_where_ranges_do_not_prove_it_inside():
    f = _shifted(16, 4)                             # no tail: every access proven inside
    assert bounds_check(f, data_only=False) is f
    out = bounds_check(_shifted(10, 4, vectorize=True), data_only=False)
    # the tail's guard (likely(i.inner < 2)) is not a fact the check uses: its load and
    # store are checked in a serial copy; a vector loop runs when all lanes are inside.
    # The main part's lanes are proven inside A (a constant size) by its ranges, so only
    # the tail's loop is versioned
    assert out.attrs["bounds_checks"] == [Check("main", "A", "load"),
                                          Check("main", "B", "store")]
    versions = [x for x in nodes(out.body, S.IfThenElse) if isinstance(x.then_case, S.For)
                and x.then_case.kind is S.ForKind.VECTORIZED]
    assert len(versions) == 1
    assert all(v.else_case.kind is S.ForKind.SERIAL for v in versions)
    for v in versions:                              # the fast copies record nothing
        assert not [x for x in nodes(v.then_case, S.BufferStore) if x.buffer.name == RECORD_NAME]
