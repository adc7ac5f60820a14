"""bench/common.py frozen_heap: timed builds do not pay for collecting the bench's own heap."""
import gc
import os
import sys
import weakref

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import common  # noqa: E402


class _Node:
    pass


def _cycle():
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a


def test_objects_from_before_are_not_collected_within_and_are_after():
    keep = [_cycle()]
    gone = weakref.ref(keep[0])
    with common.frozen_heap():
        assert gc.get_freeze_count() > 0
        keep.clear()                   # the cycle is garbage now, but was there before
        gc.collect()
        assert gone() is not None
        fresh = weakref.ref(_cycle())  # made within: still collected
        gc.collect()
        assert fresh() is None
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None


def test_the_heap_is_unfrozen_when_the_body_raises():
    with pytest.raises(KeyError):
        with common.frozen_heap():
            raise KeyError("x")
    assert gc.get_freeze_count() == 0
