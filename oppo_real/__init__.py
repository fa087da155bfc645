"""oppo_real: run the simulator's policies on real engines (vLLM / torch) and measure the same timeline."""
