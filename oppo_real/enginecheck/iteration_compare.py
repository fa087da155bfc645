"""Comparing two runs of an engine-check scenario: first divergence, totals, per-request milestones, report;
:func:`check` runs a scenario on both engines.

Totals (each reported twice, ``vllm_<total>`` and ``sim_<total>``): ``iterations``, ``preemptions``,
``scheduled_tokens``, ``tokens_per_iter_mean``, ``tokens_per_iter_max``, ``prefix_hit_tokens``,
``kv_peak_blocks``. The bound the issue sets for what cannot be reproduced exactly: iterations and
preemptions within 2%.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from oppo_real.enginecheck.workload import IterRecord, Scenario, replay_sim

BOUND = 0.02
TOTALS = ("iterations", "preemptions", "scheduled_tokens", "tokens_per_iter_mean", "tokens_per_iter_max",
          "prefix_hit_tokens", "kv_peak_blocks")
FIELDS = ("scheduled", "preempted", "kv_used", "ended")


def first_divergence(vllm: list[IterRecord], sim: list[IterRecord]) -> dict | None:
    """The first iteration where the runs differ: ``{iteration, field, vllm, sim}`` (None: identical)."""
    for a, b in zip(vllm, sim):
        for f in FIELDS:
            va, vb = getattr(a, f), getattr(b, f)
            if va != vb:
                return {"iteration": a.it, "field": f, "vllm": _plain(va), "sim": _plain(vb)}
    if len(vllm) != len(sim):
        return {"iteration": min(len(vllm), len(sim)) + 1, "field": "iterations", "vllm": len(vllm), "sim": len(sim)}
    return None


def _plain(v):
    return [list(x) if isinstance(x, tuple) else x for x in v] if isinstance(v, tuple) else v


def totals(records: list[IterRecord]) -> dict[str, float]:
    toks = [r.tokens for r in records]
    return {
        "iterations": len(records),
        "preemptions": sum(len(r.preempted) for r in records),
        "scheduled_tokens": sum(toks),
        "tokens_per_iter_mean": sum(toks) / len(toks) if toks else 0.0,
        "tokens_per_iter_max": max(toks, default=0),
        "prefix_hit_tokens": sum(s[3] for r in records for s in r.scheduled),
        "kv_peak_blocks": max((r.kv_used for r in records), default=0),
    }


def milestones(records: list[IterRecord]) -> dict[str, dict[str, int]]:
    """Per request: first iteration it was scheduled, the iteration it ended (finished or aborted), preemptions."""
    out: dict[str, dict[str, int]] = {}

    def row(rid: str) -> dict[str, int]:
        return out.setdefault(rid, {"first_scheduled": 0, "ended": 0, "preempted": 0})

    for r in records:
        for rid, *_ in r.scheduled:
            if not row(rid)["first_scheduled"]:
                row(rid)["first_scheduled"] = r.it
        for rid in r.preempted:
            row(rid)["preempted"] += 1
        for rid in r.ended:
            row(rid)["ended"] = r.it
    return out


@dataclass(frozen=True)
class CheckResult:
    """One scenario run on both engines."""

    scenario: Scenario
    vllm: list[IterRecord]
    sim: list[IterRecord]
    num_gpu_blocks: int  # as vLLM allocated them
    vllm_version: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def divergence(self) -> dict | None:
        return first_divergence(self.vllm, self.sim)

    @property
    def identical(self) -> bool:
        return self.divergence is None

    @property
    def within_bound(self) -> bool:
        """Iterations and preemptions within 2% of vLLM's (the issue's bound where decisions differ)."""
        tv, ts = totals(self.vllm), totals(self.sim)
        return all(abs(tv[k] - ts[k]) <= BOUND * tv[k] for k in ("iterations", "preemptions"))

    def totals_table(self) -> pd.DataFrame:
        tv, ts = totals(self.vllm), totals(self.sim)
        return pd.DataFrame({"vllm": tv, "sim": ts}).rename_axis("total").reset_index()

    def requests_table(self) -> pd.DataFrame:
        """Per request: first iteration scheduled, iteration finished (a deferred request: aborted), preemptions."""
        mv, ms = milestones(self.vllm), milestones(self.sim)
        rows = []
        for rid in sorted(set(mv) | set(ms)):
            a, b = mv.get(rid, {}), ms.get(rid, {})
            rows.append({"request": rid,
                         "vllm_first_scheduled": a.get("first_scheduled"), "sim_first_scheduled": b.get("first_scheduled"),
                         "vllm_finished": a.get("ended"), "sim_finished": b.get("ended"),
                         "vllm_preempted": a.get("preempted"), "sim_preempted": b.get("preempted")})
        return pd.DataFrame(rows)

    def record(self) -> dict:
        """The ``--json`` record: name, each total as ``vllm_<total>`` / ``sim_<total>``, verdict, divergence."""
        sc = self.scenario
        rec: dict = {"name": sc.name, "about": sc.about, "identical": self.identical,
                     "within_2pct": self.within_bound, "first_divergence": self.divergence, "notes": list(self.notes)}
        tv, ts = totals(self.vllm), totals(self.sim)
        for k in TOTALS:
            rec[f"vllm_{k}"] = tv[k]
            rec[f"sim_{k}"] = ts[k]
        rec["settings"] = {**sc.settings.__dict__, "num_gpu_blocks_allocated": self.num_gpu_blocks,
                           "max_model_len": sc.max_model_len}
        rec["requests"] = self.requests_table().to_dict(orient="records")
        rec["vllm_version"] = self.vllm_version
        return rec

    def report(self) -> str:
        """A readable block for the console."""
        sc = self.scenario
        div = self.divergence
        head = f"== {sc.name}: {sc.about}"
        verdict = (f"identical decisions in all {len(self.vllm)} iterations" if div is None else
                   f"FIRST DIVERGENCE at iteration {div['iteration']} ({div['field']}): vllm={div['vllm']} sim={div['sim']}")
        with pd.option_context("display.width", 160, "display.max_rows", 200, "display.float_format", "{:.4g}".format):
            parts = [head, verdict, self.totals_table().to_string(index=False), self.requests_table().to_string(index=False)]
        parts += [f"note: {n}" for n in self.notes]
        return "\n".join(parts)


def check(sc: Scenario, model_dir, cores: str | None = None) -> CheckResult:
    """Run ``sc`` on real vLLM and through the simulator (on the blocks vLLM allocated); the comparison."""
    from oppo_real.enginecheck.vllm_run import run_vllm

    v = run_vllm(sc, model_dir, cores)
    notes = []
    if v.num_gpu_blocks != sc.settings.num_gpu_blocks:
        notes.append(f"vLLM allocated {v.num_gpu_blocks} blocks, not the {sc.settings.num_gpu_blocks} asked for; "
                     "the simulator used vLLM's number")
    res = CheckResult(sc, v.records, replay_sim(sc, v.num_gpu_blocks), v.num_gpu_blocks, v.version, tuple(notes))
    return replace(res, notes=res.notes + tuple(explain(res)))


def explain(res: CheckResult) -> list[str]:
    """Notes on what a scenario exercised, or on why the runs differ."""
    t = totals(res.vllm)
    if res.identical:
        return [(f"exercised: {t['preemptions']} preemptions, {t['prefix_hit_tokens']} prefix-cache hit tokens, "
                 f"peak {t['kv_peak_blocks']} of {res.num_gpu_blocks - 1} usable blocks")]
    d = res.divergence
    ok = "within" if res.within_bound else "OUTSIDE"
    return [(f"decisions differ from iteration {d['iteration']} ({d['field']}); iterations and preemptions are "
             f"{ok} the 2% bound")]
