"""Runs a test module's function in a new Python process, as a server starts: after a long
test session the Python heap itself grows into fresh pages at any allocation, which a
count of page faults must not see."""
import os
import subprocess
import sys


def run_fresh(module, function, timeout=600):
    """Calls `module.function()` (a module of tests/) in a fresh interpreter; fails the
    test with its stderr when it raises."""
    code = (f"import sys; sys.path.insert(0, sys.argv[1]); import {module} as t; t.{function}()")
    r = subprocess.run([sys.executable, "-c", code, os.path.dirname(os.path.abspath(__file__))],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
