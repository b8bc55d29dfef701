"""The engineering every script shares. Every script imports it before torch: idle OpenMP threads then sleep
rather than spin (libgomp reads OMP_WAIT_POLICY once, as torch loads), which on a busy machine makes a run
several times faster (docs/speed.md)."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
