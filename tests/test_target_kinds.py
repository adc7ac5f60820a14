"""The target-kind registry: every registered kind builds a small schedule (and runs it where
its device is here), an unknown kind is an error that names it, and a kind registered in
one call builds, parses and is dropped again."""
import numpy as np
import pytest

import tdsl
import tdsl.target as tt
from tdsl.build import BUILDERS
from tdsl.codegen import source_build
from tdsl.errors import BuildError
from tdsl.target import Target, TargetKind, kind_of


def _double(n=256, bind=False):
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = tdsl.create_schedule(B)
    if bind:
        bx, tx = s[B].split(B.op.axis[0], factor=64)
        s[B].bind(bx, tdsl.thread_axis("blockIdx.x"))
        s[B].bind(tx, tdsl.thread_axis("threadIdx.x"))
    return s, [A, B]


def _runs_here(kind):
    return kind.device == "cpu" or tdsl.Device(kind.device).exist


@pytest.mark.parametrize("name", tt.kinds())
def test_every_registered_kind_builds(name):
    kind = kind_of(name)
    assert name in BUILDERS
    s, args = _double(bind=kind.is_gpu)
    m = tdsl.build(s, args, target=name)
    assert m.get_source()
    if _runs_here(kind):
        a = np.arange(256, dtype="float32")
        b = np.empty_like(a)
        m(a, b)
        np.testing.assert_allclose(b, a * 2 + 1)


@pytest.mark.parametrize("name", [n for n in tt.kinds() if kind_of(n).emulates_gpu])
def test_kinds_that_emulate_gpus_run_gpu_schedules(name):
    s, args = _double(bind=True)
    m = tdsl.build(s, args, target=name)
    assert m.kernels                                 # the GPU passes split it into kernels
    a = np.arange(256, dtype="float32")
    b = np.empty_like(a)
    m(a, b)
    np.testing.assert_allclose(b, a * 2 + 1)


def test_shipped_kinds():
    assert tt.kinds()[:4] == ("llvm", "c", "cuda", "opencl")
    assert [n for n in tt.kinds() if kind_of(n).is_gpu][:2] == ["cuda", "opencl"]
    assert Target("cuda").is_gpu and Target("opencl").family == "gpu"
    assert not Target("c").is_gpu and Target("llvm").family == "cpu"
    assert kind_of("c").emulates_gpu and kind_of("cuda").warp_shuffles
    assert Target("opencl").gpu == tt.GENERIC_GPU_FACTS


def test_an_unknown_kind_is_named():
    with pytest.raises(BuildError, match="unknown target kind 'tpu'.*llvm, c, cuda, opencl"):
        kind_of("tpu")
    s, args = _double()
    with pytest.raises(BuildError, match="unknown target 'tpu'"):
        tdsl.build(s, args, target="tpu")
    with pytest.raises(BuildError, match="'tpu'"):
        tdsl.lower(s, args, target="tpu")


def test_bad_kinds_are_refused():
    with pytest.raises(BuildError, match="family"):
        TargetKind("toy", "tpu")
    with pytest.raises(BuildError, match="lower-case word"):
        TargetKind("Toy C", "cpu")
    with pytest.raises(BuildError, match="unknown options"):
        TargetKind("toy", "cpu", options=("-O3",))
    with pytest.raises(BuildError, match="already registered"):
        tdsl.register_target_kind(TargetKind("c", "cpu"), source_build.build_c)
    with pytest.raises(BuildError, match="generate must be a function"):
        tdsl.register_target_kind(TargetKind("toy", "cpu"), None)
    assert "toy" not in tt.kinds()


@pytest.fixture
def toy():
    """A CPU kind that builds through the C printer and takes -mcpu; dropped afterwards."""
    kind = tdsl.register_target_kind(TargetKind("toy-c", "cpu", options=("-mcpu",)),
                                     lambda func, target: source_build.build_c(func))
    yield kind
    tdsl.unregister_target_kind("toy-c")
    assert "toy-c" not in tt.kinds() and "toy-c" not in BUILDERS


def test_a_registered_kind_builds_runs_and_goes(toy):
    s, args = _double()
    with Target("toy-c"):                            # a target string parsed while registered
        m = tdsl.build(s, args)
    assert "tdsl_main" in m.get_source() and "toy-c" in tt.kinds()
    a = np.arange(256, dtype="float32")
    b = np.empty_like(a)
    m(a, b)
    np.testing.assert_allclose(b, a * 2 + 1)
    assert Target("toy-c -mcpu=haswell").cpu == "haswell"
    with pytest.raises(BuildError, match="takes no options but -mcpu=NAME"):
        Target("toy-c -num-cores=2")
    with pytest.raises(BuildError, match="extern"):      # its builder calls no extern stages
        X = tdsl.extern((4,), [], lambda ins, outs: tdsl.call_packed("no.such", outs[0]),
                        name="X")
        tdsl.build(tdsl.create_schedule(X.op), [X], target="toy-c")
    tdsl.unregister_target_kind("toy-c")
    with pytest.raises(BuildError, match="unknown target 'toy-c'"):
        tdsl.build(s, args, target="toy-c")          # the parsed-target cache forgot it


def test_a_kind_without_a_build_step_says_so():
    tt.register_kind(TargetKind("facts-only", "gpu"))
    try:
        s, args = _double(bind=True)
        with pytest.raises(BuildError, match="no build step .* 'facts-only'"):
            tdsl.build(s, args, target="facts-only")
        assert Target("facts-only").warp_size == tt.GENERIC_GPU_FACTS.warp_size
    finally:
        tt.unregister_kind("facts-only")
