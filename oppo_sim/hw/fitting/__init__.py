"""Fitting to measurements: calibration profiles, held-out checks, per-step executor overheads."""
