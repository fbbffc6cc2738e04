"""Search floor: the driver, samplers, the candidate pipeline, the pools, and telling Optuna."""
