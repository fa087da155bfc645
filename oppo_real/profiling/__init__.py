"""Measuring the real stack for the simulator's cost model: the engines' operations (``engine_ops``:
decode, prefill, weight sync; ``train_ops``: PPO training passes), how much of a decode iteration is GPU
kernels (``kernel_share``), the static torch decoder's calls (``static_decoder``), the real driver's own
time outside the engines (``driver_overheads``), and the GPU table's prediction against a measured GPU
with the fit checked on held-out grid points (``gpu_model_error``)."""
