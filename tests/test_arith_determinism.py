"""tdsl.arith answers the same whatever the ids of the Vars (their hashes): the same
network built in two processes must give the same code."""
import random

from tdsl import arith
from tdsl.ir import expr as E
from tdsl.ir.expr import Range, Var


def _cyclic():
    """Loop ranges narrowed by a guard (passes.simplify narrows each loop variable by
    the others), so each range mentions the others: the relaxation order the proofs
    follow on such a cycle comes from the order of the context's map."""
    i, jo, jj = Var("i"), Var("jo"), Var("jj")
    c = E.convert
    r = lambda lo, ext: Range(c(lo), c(ext))      # noqa: E731
    ranges = {
        i: r(0, E.Min(64 - jo * 7 - jj * 56, c(7))),
        jo: r(0, E.Min(10 - jj * 8 + E.FloorDiv(0 - i, c(7)), c(8))),
        jj: r(0, E.FloorDiv(7 - i - jo * 7, c(56)) + 2),
    }
    return jj * 8 + jo < 10, ranges


def test_cyclic_ranges_answer_the_same_for_any_ids():
    # fresh Vars each time: new ids, so sets of them iterate in another order
    rng = random.Random(0)
    seen = set()
    for _ in range(40):
        cond, ranges = _cyclic()
        items = list(ranges.items())
        rng.shuffle(items)
        seen.add(str(arith.simplify(cond, dict(items))))
    assert len(seen) == 1, seen


def test_same_name_other_range_is_another_cache_entry():
    # the caches key on the Var object (its number), never its name: a kernel's
    # x in [0, 13) must not lend its x // 13 == 0 to another kernel's x in [0, 26)
    for first, second in ((13, 26), (26, 13)):
        a, b = Var("x"), Var("x")
        ra = {a: Range(E.convert(0), E.convert(first))}
        rb = {b: Range(E.convert(0), E.convert(second))}
        got = [str(arith.simplify(a // 13 * 52 + a, ra)),
               str(arith.simplify(b // 13 * 52 + b, rb))]
        want = {13: "x", 26: "x // 13 * 52 + x"}
        assert got == [want[first], want[second]]
