"""bench/cpu_time.py: the calling thread's CPU time leaves out the time a call waits."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import cpu_time  # noqa: E402


def _spin(seconds):
    """Computes until this thread has had `seconds` of CPU, however long others hold the core."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_thread_cpu_counts_work_not_waiting():
    cpu, wall = cpu_time.thread_cpu([lambda: time.sleep(0.004), lambda: _spin(0.004)], calls=5)
    assert cpu.shape == wall.shape == (2, 5)
    assert (wall >= 0.004).all()
    assert cpu[0].max() < 0.002                 # asleep: next to no CPU time
    assert cpu[1].min() >= 0.004                # computing: all of its own time
