"""The prompt, logits and micro-batch options of ``oppo-sim run/compare/sweep/plan`` (and the prompt ones of
``oppo-real run``): how long a prompt may be and what happens to a longer one, as RL frameworks apply it
when they load a prompt set, and whether the trainer materialises the full logits.

- ``--max-prompt N`` (verl ``data.max_prompt_length``, OpenRLHF ``--prompt_max_len``; default
  :data:`~oppo_sim.traces.trace.DEFAULT_MAX_PROMPT` = 131,072, the 128k context of Llama 3.1, Qwen2.5 with
  YaRN and DeepSeek-V3, over every prompt of the shipped and public traces — verl's 512 and OpenRLHF's
  1,024 would drop ordinary prompts of the shipped trace; 0 = no cap): a longer prompt
  is filtered (its row dropped, as verl's ``data.filter_overlong_prompts``), or with
  ``--truncate-prompt`` cut to N tokens (verl ``data.truncation``, OpenRLHF's tokenizer truncation). The
  run's first line says how many prompts were filtered or truncated; if every prompt would be filtered,
  the command stops with one line. The rule itself is ``Trace.limited`` (``traces/trace.py``).
- ``--full-logits``: the trainer keeps the lm_head's logits for every token (verl with
  ``use_fused_kernels=False``, a plain Hugging Face forward); by default log-probs and entropy are
  computed chunk-wise (``hw/memory/train_memory.py``).
- ``--micro-batch-tokens`` / ``--logprob-micro-batch-tokens``: the trainer's micro-batches, packed to that many tokens
  a data-parallel rank, of training and of the forward-only passes (NeMo RL's ``train_mb_tokens`` /
  ``logprob_mb_tokens``, verl's dynamic batch size).
"""

from __future__ import annotations

import argparse

from oppo_sim.cliargs import nonneg_int, positive
from oppo_sim.traces.trace import DEFAULT_MAX_PROMPT, Trace


def add_limit_args(g: argparse._ArgumentGroup) -> None:
    """Add ``--max-prompt`` and ``--truncate-prompt`` to ``g``."""
    g.add_argument("--max-prompt", type=nonneg_int, default=DEFAULT_MAX_PROMPT, metavar="N",
                   help="prompt cap in tokens, as verl data.max_prompt_length / OpenRLHF --prompt_max_len: longer "
                        "prompts are filtered (verl filter_overlong_prompts) unless --truncate-prompt (default "
                        "%(default)s: the 128k context of Llama 3.1 / Qwen2.5-YaRN / DeepSeek-V3, over every prompt "
                        "of the shipped and public traces; 0 = no cap)")
    g.add_argument("--truncate-prompt", action="store_true",
                   help="cut prompts over --max-prompt to it (verl data.truncation) instead of filtering them "
                        "(default off: filtered)")


def add_micro_batch_args(g: argparse._ArgumentGroup) -> None:
    """Add the trainer's micro-batch token budgets to ``g`` (``TrainMemoryConfig``)."""
    g.add_argument("--micro-batch-tokens", type=positive(), default=None,
                   help="tokens per training micro-batch (default: one longest sequence)")
    g.add_argument("--micro-batch-size", type=positive(), default=None,
                   help="sequences per training micro-batch, a fixed count instead of a token budget (default: one)")
    g.add_argument("--logprob-micro-batch-tokens", type=positive(), default=None, help="tokens per micro-batch of "
                   "the forward-only passes: log-probs, reference, reward, values (default: training's micro-batch)")
    g.add_argument("--logprob-micro-batch-size", type=positive(), default=None, help="sequences per micro-batch of "
                   "the forward-only passes, a fixed count (default: training's micro-batch)")


def micro_batch_fields(a: argparse.Namespace) -> dict:
    """``TrainMemoryConfig`` keywords of the micro-batch options (absent from a command: None)."""
    names = ("micro_batch_tokens", "micro_batch_size", "logprob_micro_batch_tokens", "logprob_micro_batch_size")
    return {n: getattr(a, n, None) for n in names}


def add_logits_arg(g: argparse._ArgumentGroup) -> None:
    """Add ``--full-logits`` to ``g``."""
    g.add_argument("--full-logits", action="store_true",
                   help="the trainer materialises the logits of every token (verl use_fused_kernels=False); "
                        "default off: log-probs and entropy computed in chunks of 512 tokens")


def limit_fields(a: argparse.Namespace) -> dict:
    """``SimConfig`` keywords of the prompt options."""
    return {"max_prompt": a.max_prompt or None, "truncate_prompt": a.truncate_prompt}


def limits_note(trace: Trace) -> str:
    """``"; prompts over 131,072 tokens: 1 filtered"`` (empty where no cap was applied)."""
    if trace.max_prompt is None:
        return ""
    done = [f"{n:,} {what}" for n, what in ((trace.n_prompts_filtered, "filtered"),
                                            (trace.n_prompts_truncated, "truncated")) if n]
    return f"; prompts over {trace.max_prompt:,} tokens: {', '.join(done) or 'none'}"


__all__ = ["add_limit_args", "add_logits_arg", "limit_fields", "limits_note"]
