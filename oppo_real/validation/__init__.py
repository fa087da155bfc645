"""Predicted against measured: the mirror of a real run in the simulator (``mirror``), what a run
measures and whether decisions agreed (``run_metrics``), the validation itself (``validate``) and its
figures (``validation_plots``)."""
