"""Measuring the real stack for the simulator's cost model: the engines' operations (``engine_ops``:
decode, prefill, weight sync; ``train_ops``: PPO training passes) at the shapes ``model_shape`` names
(dense, or a small mixture of experts), how much of a decode iteration is GPU kernels (``kernel_share``),
the bulk copies of sleep / wake and weight sync (``host_moves``), the static torch decoder's calls
(``static_decoder``), the real driver's own time outside the engines (``driver_overheads``), and the GPU
table's prediction against a measured GPU with the fit checked on held-out grid points
(``gpu_model_error``)."""
