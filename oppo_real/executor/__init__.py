"""The real executor's run loop: the session (models, Ray, the three role workers: ``session``), the real
driver of the step machine (``real_driver``), the messages it sends its workers (``messages``), the
samples it holds (``sample_store``), a whole run with a checkpoint after every step (``runner``:
``run_real``) and its result in the simulator's schema (``real_result``)."""
