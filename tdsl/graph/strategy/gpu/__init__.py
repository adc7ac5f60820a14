"""The GPU (cuda and opencl) schedules of fused groups."""
