"""Tensor intrinsics (TVM's `decl_tensor_intrin`): a small computation, written as a
tensor expression over placeholders, with the code that does it in one step.

`s[C].tensorize(axis, intrin)` replaces the loops of `C` from `axis` inward by
`intrin.fimpl(ins, outs)` when they compute what `intrin.op` computes
(`tdsl.schedule.tensorize` checks that). `fimpl` receives one `Region` per input placeholder
of `op` and one for its output: where in the real buffers the block starts, with
`access_ptr()` to hand to a machine instruction. It returns a statement, usually
`call(name, ...)` of an instruction a code generator knows (`tdsl.codegen.llvm.tensor_ops`).

For a reduction the intrinsic is the update (`out += ...`). The loops that set the output
to the reduction's identity stay tdsl's own, unless the intrinsic has a `reduce_init(outs)`
that returns a statement for its output block (TVM's reduce_init): then that statement runs
once per block, in the loops outside both the block and the reduction. An output only
intrinsics may touch (a tensor-core accumulator held in registers) needs one.

Two options widen what a call may stand for. `strided=True`: a block may sit in a larger
buffer (a tile of a shared-memory matrix) rather than be contiguous; each `Region` then
carries `strides`, the buffer's element step per placeholder axis, for `fimpl` to pass on.
`warp=True`: every lane of a warp executes the same call together, each doing its part (a
CUDA `mma.sync`); lowering checks that the warp's 32 lanes are threadIdx.x and that no
loop around the call is bound to threadIdx.x, so all of them reach it with the same blocks.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from ..errors import TdslError
from ..ir import expr as E
from ..ir import stmt as S
from .tensor import ComputeOp, PlaceholderOp, Tensor


class Region:
    """The block of a buffer one tensor-intrinsic call reads or writes: `buffer` indexed
    from `indices`, laid out as the intrinsic's placeholder `tensor` (row-major)."""

    def __init__(self, tensor: Tensor, buffer: S.Buffer, indices, strides=None):
        self.tensor = tensor
        self.buffer = buffer
        self.indices = tuple(indices)
        self.strides = tuple(strides) if strides is not None else None

    @property
    def dtype(self):
        return self.buffer.dtype

    def access_ptr(self, mode: str = "r") -> E.Expr:
        """The address of the block's first element (for the code generator); its dtype
        "handle" keeps value passes (such as legalize_bf16) off it. `mode` ("r", "w",
        "rw") says whether the callee writes through it: thread_sync must see a write into
        shared memory to put a barrier before the threads that read it."""
        if mode not in ACCESS:
            raise TdslError(f"access_ptr: mode must be one of {sorted(ACCESS)}, got {mode!r}")
        return E.Call("address_of", (E.BufferLoad(self.buffer, self.indices),
                                     E.const(ACCESS[mode])), "handle")


ACCESS = {"r": 1, "w": 2, "rw": 3}     # the mask address_of's second argument holds


def pointer_writes(e) -> bool:
    """Whether `e`, an address_of call, is a pointer the callee writes through."""
    return len(e.args) > 1 and bool(e.args[1].value & ACCESS["w"])


class TensorIntrin:
    def __init__(self, op: ComputeOp, fimpl: Callable, name: str, inputs: List[Tensor],
                 strided: bool = False, warp: bool = False, reduce_init=None):
        self.op = op
        self.fimpl = fimpl
        self.reduce_init = reduce_init      # outs -> statement or None (tdsl's loops)
        self.name = name
        self.inputs = inputs
        self.strided = strided
        self.warp = warp

    def __repr__(self):
        return f"TensorIntrin({self.name!r})"


def decl_tensor_intrin(op, fimpl, name: Optional[str] = None, inputs=None,
                       strided: bool = False, warp: bool = False,
                       reduce_init: Optional[Callable] = None) -> TensorIntrin:
    """A tensor intrinsic computing `op` (a compute over placeholders) by `fimpl(ins,
    outs) -> statement`; `ins` follow `inputs` (default: the placeholders in the order
    `op` first reads them). `strided`, `warp` and `reduce_init(outs)`: see the module's
    doc."""
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp) or len(op.outputs) != 1:
        raise TdslError(f"decl_tensor_intrin: expected one compute with one output, got {op!r}")
    if not callable(fimpl):
        raise TdslError(f"decl_tensor_intrin: fimpl must be callable, got {fimpl!r}")
    if reduce_init is not None and not callable(reduce_init):
        raise TdslError(f"decl_tensor_intrin: reduce_init must be callable, got {reduce_init!r}")
    reads = list(inputs) if inputs is not None else list(op.input_tensors())
    for t in reads:
        if not isinstance(t.op, PlaceholderOp):
            raise TdslError(f"decl_tensor_intrin: '{t.name}' is computed; an intrinsic's "
                            "definition reads placeholders only")
    return TensorIntrin(op, fimpl, name or op.name, reads, strided=strided, warp=warp,
                        reduce_init=reduce_init)


def call(name: str, *args, dtype: str = "int32") -> S.Stmt:
    """A statement calling the machine operation `name` on `args` (pointers from
    `Region.access_ptr()`, or values)."""
    return S.Evaluate(E.Call(name, tuple(E.convert(a) for a in args), dtype))
