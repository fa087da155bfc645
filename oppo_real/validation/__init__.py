"""Predicted against measured: the mirror of a real run in the simulator (``mirror``), what a run
measures and whether decisions agreed (``compare``), the validation itself (``run``) and its figures
(``plots``)."""
