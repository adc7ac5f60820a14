"""The GEMM-on-CPU tutorial sequence (blocking, vectorize, loop permutation, array packing,
write cache, parallel) and the register-blocked schedule: each expressible and correct,
on square and ragged sizes."""
import numpy as np
import pytest

import tdsl
from tdsl import tiling
from tdsl.examples import gemm
from tdsl.target import Target


@pytest.mark.parametrize("shape", [(64, 64, 64), (50, 70, 33)], ids=["square", "ragged"])
@pytest.mark.parametrize("step", [name for name, _ in gemm.STEPS])
def test_gemm_step(step, shape):
    M, N, K = shape
    make = dict(gemm.STEPS)[step]
    s, args = make(M, N, K)
    f = tdsl.build(s, args)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_the_steps_use_what_they_promise():
    text = {name: str(tdsl.lower(*make(64, 64, 64))) for name, make in gemm.STEPS}
    assert f"vectorized({gemm.block_size()})" in text["vectorize"]   # two vectors of the host
    assert "packedB" in text["array packing"] and "packedB" not in text["loop permutation"]
    assert "C.global = allocate" in text["write cache"]
    assert "parallel(" in text["parallel"].split("C.global")[0]       # the block loop
    mr, nr = tiling.gemm_tile(Target.host(), 64, 64)      # the register tile of this host
    assert f'C.local = allocate(({mr * nr}), float32, "local")' in text["register blocked"]
