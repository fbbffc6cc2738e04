"""Shared test set-up: the DSL's target arch must be set before anything imports it."""

import os

# Without a GPU to detect, the DSL needs its target before its first import (tsopt.core.dsl_env).
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
