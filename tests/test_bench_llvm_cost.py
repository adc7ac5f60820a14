"""bench/llvm_cost.py: the modules, functions and IR lines of a cold build, and the fixed
cost of an LLVM module against its functions."""
import os
import re
import sys

import tdsl.graph as G
from tdsl.graph import executor, models

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import llvm_cost  # noqa: E402


def test_copies_of_a_kernel_link_into_one_module():
    text, symbol = llvm_cost.small_kernel_ir()
    copies = [llvm_cost.renamed(text, symbol, i) for i in range(3)]
    # each copy defines its own kernel and globals, so that linking them does not clash
    for i, t in enumerate(copies):
        assert f"@{symbol}_{i}(" in t and f"@__tdsl_num_threads_{i}" in t
    assert len(llvm_cost.compile_linked(llvm_cost.llvm_binding(), copies, llvm_cost.L.parse_target("llvm"))) > 0


def test_module_cost_is_measured():
    per_module, per_function, load = llvm_cost.module_cost(copies=3, repeats=1)
    assert per_function > 0 and load > 0
    assert per_module == per_module           # a number, which may be negative under load


def _symbolic_mlp():
    m = models.mlp(batch=2, sizes=(64, 32, 8))
    d = m.graph.input[0].type.tensor_type.shape.dim[0]
    d.ClearField("dim_value")
    d.dim_param = "batch"
    return m


def test_build_counts_cover_every_compiled_module():
    model = _symbolic_mlp()
    dyn = llvm_cost.build_counts(model)
    static = llvm_cost.build_counts(model, {"batch": 2})
    for c in (dyn, static):
        assert c["modules"] >= 1 and c["functions"] >= 2 * c["modules"]   # a kernel and its signature
        assert c["ir_lines"] > 0 and c["cpu_s"] > 0 and c["llvm_s"] > 0
        secs = [s for _, _, s in c["largest"]]
        assert secs == sorted(secs, reverse=True) and len(secs) == min(5, c["modules"])
        assert all(re.fullmatch(r"tdsl_\w+", sym) for sym, _, _ in c["largest"])
    # the same network built again from a cold cache compiles the same modules
    assert llvm_cost.build_counts(model, {"batch": 2})["modules"] == static["modules"]
    # a static kernel has no size-class variants: one module per compiled kernel
    executor.clear_kernel_cache()
    exe = G.build(G.optimize(G.from_onnx(model, dims={"batch": 2})))
    assert static["modules"] == exe.stats["compiled"]
    assert dyn["modules"] >= static["modules"]
