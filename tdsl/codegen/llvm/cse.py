"""An IRBuilder that reuses a pure instruction already emitted in the same basic block.

Unrolled register tiles emit the same address arithmetic once per unrolled step: in a
depthwise 7x7 conv, each of ~1,500 multiply-adds recomputed its weight's index
(`sdiv`, `srem`, `icmp`, `zext`, `sub`, `mul`, `sext`, `getelementptr`), half of the
kernel's instructions. LLVM removes the copies again (EarlyCSE, GVN), but its time, and
tdsl's time to build and print the instructions, grow with their number. Local value
numbering at emission keeps them out: an arithmetic, comparison, cast, address or vector
shuffle instruction whose operands are the same values as an earlier one in the current
block is that earlier one. Loads, stores and calls are never reused.

Only when the builder appends at the end of its block: an earlier instruction of the
block then dominates the insertion point.
"""
from __future__ import annotations

from llvmlite import ir

PURE = ("add", "sub", "mul", "sdiv", "srem", "udiv", "urem", "shl", "ashr", "lshr", "and_",
        "or_", "xor", "zext", "sext", "trunc", "icmp_signed", "icmp_unsigned", "gep",
        "insert_element", "extract_element", "shuffle_vector", "select")


def _key(v):
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType):
        return ("int", v.type.width, v.constant)
    if isinstance(v, (list, tuple)):
        return tuple(_key(x) for x in v)
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    if isinstance(v, ir.Type):
        return str(v)
    return id(v)


def _reusing(name):
    emit = getattr(ir.IRBuilder, name)

    def method(self, *args, **kw):
        block = self._block
        if self._anchor != len(block.instructions):
            return emit(self, *args, **kw)
        key = (name, id(block), _key(args), tuple((k, _key(v)) for k, v in sorted(kw.items()) if k != "name"))
        hit = self._seen.get(key)
        if hit is not None:
            return hit[0]
        v = emit(self, *args, **kw)
        self._seen[key] = (v, block, args, kw)      # keeps what the ids name alive
        return v
    method.__name__ = name
    method.__doc__ = emit.__doc__
    return method


class ReusingBuilder(ir.IRBuilder):
    def __init__(self, block=None):
        super().__init__(block)
        self._seen = {}

    def at_end(self) -> bool:
        """Whether it appends at the end of its block (where earlier instructions of the
        block dominate the insertion point)."""
        return self._anchor == len(self._block.instructions)


for _name in PURE:
    setattr(ReusingBuilder, _name, _reusing(_name))
