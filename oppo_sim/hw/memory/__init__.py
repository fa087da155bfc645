"""What fits: training state and activations (ZeRO, Megatron), what vLLM holds besides its KV cache, the shares of a device per phase."""
