import os
import shutil
import tempfile

import pytest

try:
    import onnx.helper

    # onnx can be newer than the onnxruntime beside it (the GPU machines' onnx 1.23.1
    # writes IR version 14, their onnxruntime 1.30 reads up to 13): the tests' models are
    # written at IR version 10, which every onnxruntime the tests meet reads and which
    # carries opsets up to 21.
    _make_model = onnx.helper.make_model

    def _make_readable_model(graph, **kwargs):
        model = _make_model(graph, **kwargs)
        if "ir_version" not in kwargs:
            model.ir_version = min(model.ir_version, 10)
        return model

    onnx.helper.make_model = _make_readable_model
except ImportError:
    pass

# The suite never touches the user's compile cache (~/.cache/tdsl) nor leaves anything in
# the system temp dir: every test process, and the subprocesses and notebook kernels it
# starts, use a private cache and a private TMPDIR, removed at the end. Anything named
# tdsl* still in that TMPDIR when the session ends is a leak and fails the run. (Neither
# name starts with "tdsl": the leak checks count those.)
_CACHE_DIR = tempfile.mkdtemp(prefix="pytest-compile-cache-")
_TMP_DIR = tempfile.mkdtemp(prefix="pytest-tmpdir-")
os.environ["TDSL_CACHE_DIR"] = _CACHE_DIR
os.environ["TMPDIR"] = _TMP_DIR
tempfile.tempdir = None          # gettempdir() reads TMPDIR again
# every lowering in the suite (and in the subprocesses it starts) checks the IR after each
# pass (tdsl.passes.verify); TDSL_VERIFY=0 in the environment turns it off
os.environ.setdefault("TDSL_VERIFY", "1")


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden IR files in tests/golden")


def pytest_sessionfinish(session, exitstatus):
    leaked = sorted(e for e in os.listdir(_TMP_DIR) if e.startswith("tdsl"))
    if leaked:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"temporary files left by tdsl in {_TMP_DIR}: {leaked[:20]}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)
    shutil.rmtree(_TMP_DIR, ignore_errors=True)
