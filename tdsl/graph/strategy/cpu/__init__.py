"""The CPU (llvm and C) definitions and schedules of fused groups; see ../__init__.py."""
