"""storage_flatten: n-d buffer accesses become one flat element index.

Row-major strides; `storage_align(axis, factor, offset)` pads the stride of dimension
`axis` up to the next value with stride % factor == offset. Argument buffers keep their
n-d Buffer object (the runtime checks shapes against it); allocated buffers are replaced by
flat ones whose shape is their padded size. A buffer with `storage_swizzle(width)` keeps
its logical indices (the printers map them when they address it, so a copy of a 16-byte
chunk stays one move) and is padded to whole 128-byte rows, which the mapping permutes.
"""
from __future__ import annotations

import dataclasses

from .. import arith
from .. import dtype as dt
from ..arith.layout import strides
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator


class _Flatten(Mutator):
    def __init__(self, params):
        self.params = set(params)
        self.flat = {}   # buffer -> (flat buffer, strides)

    def _info(self, buf):
        info = self.flat.get(buf)
        if info is None:
            st, size = strides(buf)
            if buf.swizzle:
                row = 128 // max(1, dt.bits(buf.dtype) // 8)
                size = arith.simplify((size + row - 1) // row * row)
            new = buf if buf in self.params else S.Buffer(buf.name, (size,), buf.dtype, buf.scope,
                                                          swizzle=buf.swizzle)
            info = self.flat[buf] = (new, st)
        return info

    def _index(self, buf, indices):
        new, st = self._info(buf)
        idx = [self.visit(i) for i in indices]
        if len(idx) == 1 and E.is_const_int(st[0], 1):
            flat = idx[0]
        else:
            flat = None
            for i, s in zip(idx, st):
                term = i if E.is_const_int(s, 1) else i * s
                flat = term if flat is None else flat + term
            flat = flat if flat is not None else E.const(0)
        return new, (flat,)

    def visit_BufferLoad(self, e):
        new, idx = self._index(e.buffer, e.indices)
        return E.BufferLoad(new, idx)

    def visit_BufferStore(self, s):
        new, idx = self._index(s.buffer, s.indices)
        return dataclasses.replace(s, buffer=new, value=self.visit(s.value), indices=idx)

    def visit_Prefetch(self, s):
        new, idx = self._index(s.buffer, s.indices)
        return S.Prefetch(new, idx, self.visit(s.extent))

    def visit_ExternCall(self, s):
        args = tuple(self._info(a)[0] if isinstance(a, S.Buffer) else self.visit(a)
                     for a in s.args)
        return S.ExternCall(s.name, args, s.shapes, s.writes)

    def visit_Allocate(self, s):
        new, _ = self._info(s.buffer)
        return S.Allocate(new, self.visit(s.body))


def storage_flatten(func: S.PrimFunc) -> S.PrimFunc:
    return func.with_body(_Flatten(func.buffers).visit(func.body))
