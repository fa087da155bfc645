"""A NeMo RL recipe's generation engine as oppo-sim options (``policy.generation.backend``), for
:mod:`~oppo_sim.frameworks.nemo_rl`; every backend is priced as oppo-sim's vLLM-like engine, with its own layout:

- ``vllm`` (the default): ``vllm_cfg.tensor_parallel_size`` (x ``pipeline_parallel_size``) -> ``--tp``,
  ``gpu_memory_utilization`` -> ``--gpu-memory-utilization``, ``enforce_eager`` -> ``--enforce-eager``;
- ``sglang``: one SGLang server's GPUs -> ``--tp`` — ``sglang_cfg.tp_size`` at 7ea279a, ``gpus_per_server`` in
  v0.5 and before (``sglang_generation.py``: "tell SGLang how many GPUs to use (tp_size)") — and its
  ``mem_fraction_static`` (weights and KV pool, as vLLM's fraction) -> ``--gpu-memory-utilization``; unset,
  SGLang sizes it itself and oppo-sim's default stays (said in the notes);
- ``megatron``: the policy generates itself, an engine is its Megatron model-parallel group
  (``mcore_generation_config.tensor_model_parallel_size`` where given).
"""

from __future__ import annotations

from oppo_sim.frameworks.translation import as_bool, as_float, as_int

__all__ = ["engine"]

G, V, M = "policy.generation.", "policy.generation.vllm_cfg.", "policy.megatron_cfg."
S = G + "sglang_cfg."


def engine(g) -> None:
    """Echo and translate the recipe's generation engine (``g``: the reader's key getter and echo, ``nemo_rl._Get``)."""
    backend = g(G + "backend", "vllm")
    if backend != "vllm":
        g.use(G + "backend", v=backend, note="priced as oppo-sim's vLLM-like engine")
        g.b.notes.append(f"{G}backend={backend}: generation simulated as oppo-sim's vLLM-like engine")
    if backend == "megatron":
        _megatron(g)
    elif backend == "sglang":
        _sglang(g)
    else:
        _vllm(g)


def _megatron(g) -> None:
    own = G + "mcore_generation_config.tensor_model_parallel_size"  # the generation's own layout, if it has one
    key = own if g(own) is not None else M + "tensor_model_parallel_size"
    tp = as_int(key, g(key, 1))
    pp = 1 if key == own else as_int(M + "pipeline_model_parallel_size", g(M + "pipeline_model_parallel_size", 1))
    g.use(key, "--tp", tp * pp, v=tp, note="generation backend megatron: each engine is a Megatron model-parallel "
          f"group of {tp} x {pp} (tp x pp), priced as tensor parallel")


def _sglang(g) -> None:
    key = S + "tp_size" if g(S + "tp_size") is not None else S + "gpus_per_server"
    tp = as_int(key, g(key, 1))
    g.use(key, "--tp", tp, v=tp, note="the GPUs of one SGLang server, priced as vLLM's tensor parallelism")
    frac = g(S + "mem_fraction_static")
    if frac is None:
        g.b.notes.append(f"{S}mem_fraction_static unset: SGLang sizes its memory itself; oppo-sim's "
                         "--gpu-memory-utilization default is used")
        return
    frac = as_float(S + "mem_fraction_static", frac)
    g.use(S + "mem_fraction_static", "--gpu-memory-utilization", frac, v=frac,
          note="SGLang's static share of the GPU (weights and KV pool), as vLLM's gpu_memory_utilization")


def _vllm(g) -> None:
    tp = as_int(V + "tensor_parallel_size", g(V + "tensor_parallel_size", 1))
    pp = as_int(V + "pipeline_parallel_size", g(V + "pipeline_parallel_size", 1))
    g.use(V + "tensor_parallel_size", "--tp", tp * pp, v=tp, note="" if pp == 1 else
          f"x vLLM pipeline_parallel_size {pp}: each engine's {tp * pp} GPUs, priced as tensor parallel")
    if pp > 1:
        g.use(V + "pipeline_parallel_size", v=pp, note="in --tp above")
    gmu = as_float(V + "gpu_memory_utilization", g(V + "gpu_memory_utilization", 0.6))
    g.use(V + "gpu_memory_utilization", "--gpu-memory-utilization", gmu, v=gmu)
    if as_bool(V + "enforce_eager", g(V + "enforce_eager", False)):
        g.use(V + "enforce_eager", "--enforce-eager", note="no CUDA graphs: the host issues every kernel of a decode step")
    if as_bool(V + "async_engine", g(V + "async_engine", False)):
        g.use(V + "async_engine", note="vLLM's async engine: requests stream through a continuous engine")
