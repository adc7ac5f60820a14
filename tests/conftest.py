import os
import shutil
import tempfile

# The suite never touches the user's compile cache (~/.cache/tdsl): every test process, and
# the subprocesses and notebook kernels it starts, use a private one removed at the end.
# Its name does not start with "tdsl": the temp-dir leak test counts those entries.
_CACHE_DIR = tempfile.mkdtemp(prefix="pytest-compile-cache-")
os.environ["TDSL_CACHE_DIR"] = _CACHE_DIR


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden IR files in tests/golden")


def pytest_unconfigure(config):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)
