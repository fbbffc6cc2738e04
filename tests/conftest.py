"""Shared test set-up: the DSL's target arch must be set before anything imports it."""

import os

# Without a GPU to detect, the DSL needs its target before its first import (tsopt.core.dsl_env).
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

# The measuring flow runs here on a SIMULATED DEVICE (host-timed CPU stand-ins): its paired
# rounds stop on their time cap, which a test keeps short. Children inherit it.
os.environ.setdefault("TSOPT_PAIRED_TIME_CAP_S", "0.05")
os.environ.setdefault("TSOPT_PAIRED_WARMUP_MAX_S", "0.02")
