"""Measuring the real stack for the simulator's cost model: the engines' operations (``engine_ops``:
decode, prefill, PPO training, weight sync), the static torch decoder's calls (``static_decoder``), the
real driver's own time outside the engines (``driver_overheads``), and the GPU table's prediction
against a measured GPU (``gpu_model_error``)."""
