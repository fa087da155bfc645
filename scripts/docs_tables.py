"""The result tables of the docs, each rendered from one committed output (``scripts/make_docs.py`` puts
them into the pages). A table here formats; it never types a number."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "paper_figs" / "out"
RESULTS = ROOT / "docs" / "results"


def _md(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False, tablefmt="pipe", disable_numparse=True)


def _x(v: float) -> str:
    return f"{v:.2f}×"


def _pct(v: float) -> str:
    return f"{v * 100:.0f}%"


def _signed(v: float) -> str:
    return f"{v:+.0f}%".replace("-", "−")


def predictions() -> str:
    """Speedup over the baseline per trace and policy, the paper's setup (``docs/results/predictions.csv``)."""
    p = pd.read_csv(RESULTS / "predictions.csv")
    rows = []
    for trace, g in p.groupby("trace", sort=False):
        by = g.set_index("policy")
        base, oppo = by.loc["baseline"], by.loc["oppo"]
        setting = f"ZeRO-{base.zero_stage}" + ("" if base.recompute == "none" else f", {base.recompute} recompute")
        rows.append({"trace": f"`{trace}`", "oppo": f"**{_x(oppo.speedup)}**", "inter": _x(by.loc["inter", "speedup"]),
                     "intra": _x(by.loc["intra", "speedup"]), "async": _x(by.loc["async", "speedup"]),
                     "utilization baseline → oppo": f"{_pct(base.utilization_overall)} → {_pct(oppo.utilization_overall)} "
                                                    f"({_x(oppo.utilization_overall / base.utilization_overall)})",
                     "baseline s/step": f"{base.step_time_s:.1f}", "trainer (memory check)": setting,
                     "longest sequence": f"{base.max_seq_tokens:,}"})
    labels = ", ".join(f"`{lab}`" for lab in p.drop_duplicates("policy")["label"])
    return (_md(pd.DataFrame(rows)) + f"\n\nPolicies {labels}; {int(p.steps.iloc[0])} steps each; "
            f"command per trace: `{p.command.iloc[0]}` (with that trace).")


def algorithms() -> str:
    """OPPO's speedup for GRPO against PPO at equal responses per step (``docs/results/algorithms.csv``)."""
    a = pd.read_csv(RESULTS / "algorithms.csv")
    rows = []
    for (trace, alg), g in a.groupby(["trace", "algorithm"], sort=False):
        by = g.set_index("policy")
        rows.append({"trace": f"`{trace}`", "algorithm": alg, "baseline s/step": f"{by.loc['baseline', 'step_time_s']:.1f}",
                     "intra": _x(by.loc["intra", "speedup"]), "inter": _x(by.loc["inter", "speedup"]),
                     "oppo": f"**{_x(by.loc['oppo', 'speedup'])}**",
                     "utilization baseline → oppo": f"{_pct(by.loc['baseline', 'utilization_overall'])} → "
                                                    f"{_pct(by.loc['oppo', 'utilization_overall'])}"})
    cmds = "; ".join(f"`{c}`" for c in a.drop_duplicates("algorithm")["command"])
    return _md(pd.DataFrame(rows)) + f"\n\nCommands (per trace): {cmds}."


def _validation(path: Path) -> str:
    v = pd.read_csv(path)
    rows = []
    for r in v.itertuples():
        rows.append({
            "policy": r.policy, "predicted s/step": f"{r.pred_step_s:.3f}",
            f"measured s/step (min–max of {r.runs})": f"{r.meas_step_s:.3f} ({r.meas_step_min_s:.3f}–{r.meas_step_max_s:.3f})",
            "error": _signed(r.step_err_pct), "speedup pred / meas": f"{r.pred_speedup:.2f} / {r.meas_speedup:.2f}",
            "util main pred / meas": f"{_pct(r.pred_util_main)} / {_pct(r.meas_util_main)}",
            "util score pred / meas": f"{_pct(r.pred_util_score)} / {_pct(r.meas_util_score)}",
            "decisions": f"{r.decision_agreement:.2f}",
        })
    util = pd.concat([v.util_err_main_pp.abs(), v.util_err_score_pp.abs()])
    summary = (f"Median |step-time error| {v.step_err_pct.abs().median():.1f}%, median |utilization error| "
               f"{util.median():.1f} pp, median |speedup error| {v.speedup_err_pct.abs().median():.1f}%, "
               f"decision agreement {v.decision_agreement.min():.2f}–{v.decision_agreement.max():.2f}.")
    return _md(pd.DataFrame(rows)) + "\n\n" + summary


def parity() -> str:
    """The committed CPU validation (``paper_figs/out/parity.csv``)."""
    return _validation(OUT / "parity.csv")


def parity_run_a() -> str:
    """The earlier validation run the same afternoon (``paper_figs/out/validation_runs/run_a_validation.csv``)."""
    return _validation(OUT / "validation_runs" / "run_a_validation.csv")


def paper_vs_ours() -> str:
    """The paper's figures beside ours (``paper_figs/out/paper_vs_ours.md``, written by ``paper_vs_ours_table.py``)."""
    return (OUT / "paper_vs_ours.md").read_text().strip()


def _plan_row(r, rank: str, note: str = "") -> dict:
    return {"rank": rank, "configuration": f"{r.config}{note}", "samples/s": f"{r.samples_per_s:.2f}",
            "speedup": _x(r.speedup), "mean staleness": f"{r.staleness_mean:.2f}",
            "headroom": f"{r.headroom_gib:.0f} GiB", "trainer": f"ZeRO-{int(r.zero_stage)}, sp{int(r.sp)}, recompute {r.recompute}"}


def _plan(name: str, top: int, split: str | None = None) -> str:
    p = pd.read_csv(RESULTS / f"{name}.csv")
    ok = p[p.status == "ok"].sort_values("rank")
    rows = [_plan_row(r, str(int(r.rank))) for r in ok.head(top).itertuples()]
    text = (f"`{p.command.iloc[0]}`: {len(p)} configurations tried, {len(ok)} fit "
            f"({len(p) - len(ok)} refused by the memory check).")
    if split is not None:
        q = pd.read_csv(RESULTS / f"{split}.csv")
        q_ok = q[q.status == "ok"].sort_values("rank")
        best = next(q_ok.itertuples())
        rows.append(_plan_row(best, "—", f" — best of {len(q_ok)} on {best.placement}"))
        text += f" The split's row: `{q.command.iloc[0]}`."
        text += (f" The best configuration is {ok.samples_per_s.iloc[0] / best.samples_per_s:.2f}× the best on "
                 f"{best.placement}.")
    ref = p[p.is_reference]
    if len(ref) and not ref.index.isin(ok.head(top).index).any():
        rows.append(_plan_row(next(ref.itertuples()), "—", " (the reference)"))
    return _md(pd.DataFrame(rows)) + "\n\n" + text


def plan_paper() -> str:
    """The planner on the paper's setup (``docs/results/plan_paper.csv``, best on 7+1 from ``plan_paper_7p1.csv``)."""
    return _plan("plan_paper", top=5, split="plan_paper_7p1")


def plan_32b() -> str:
    """The planner on a 32B actor over two nodes (``docs/results/plan_32b.csv``)."""
    return _plan("plan_32b", top=4)


def _stage(pub: float, pred: float) -> str:
    return "" if pd.isna(pub) else f"{pub:.0f} / {pred:.0f}" if not pd.isna(pred) else f"{pub:.0f} / —"


def published_runs() -> str:
    """Published RL runs beside the simulator's uncalibrated prediction (``paper_figs/out/published_runs.csv``)."""
    p = pd.read_csv(OUT / "published_runs.csv")
    rows = []
    for r in p.itertuples():
        ok = r.status.startswith("ok")
        mean = (f"{r.mean_response:,.0f}" + ("" if r.mean_response_published else " (assumed)")
                if r.trace == "synthetic" else f"trace `{r.trace}`" if ok else "")
        rows.append({
            "run": f"[{r.key}]({r.source})", "framework": r.framework,
            "setup": f"{r.model}, {r.devices}× {r.gpu} ({r.nodes} node{'s' if r.nodes > 1 else ''}), {r.placement}",
            "algorithm": f"{r.algorithm}, {r.batch}×{r.n}, {r.reward} reward", "mean response": mean,
            "published s/step": f"{r.published_step_s:g}",
            "predicted s/step": f"{r.predicted_step_s:.1f}" if ok else "—",
            "error": (_signed(r.error_pct) + ("" if r.memory_check == "fits" else " †")
                      + (" ‡" if str(r.contradicted) == "True" else "")) if ok
            else r.status.split(":")[0].replace("|", "\\|"),
            "at ×0.5 / ×1.5 the assumed length": (f"{r.predicted_step_low_s:.0f} / {r.predicted_step_high_s:.0f} "
                                                  f"({_signed(r.error_low_pct)} / {_signed(r.error_high_pct)})")
            if ok and not pd.isna(r.predicted_step_low_s) else "",
            "at ×0.5 / ×1.5 the length spread": (
                f"{r.predicted_step_spread_low_s:.0f} / {r.predicted_step_spread_high_s:.0f} "
                f"({_signed(r.error_spread_low_pct)} / {_signed(r.error_spread_high_pct)})")
            if ok and not pd.isna(r.predicted_step_spread_low_s) else "",
            "gen / score / train, published / predicted (s)": " · ".join(
                s for s in (_stage(r.published_generation_s, r.predicted_generation_s),
                            _stage(r.published_scoring_s, r.predicted_scoring_s),
                            _stage(r.published_training_s, r.predicted_training_s)) if s),
        })
    ok = p[p.status.str.startswith("ok")]
    stated = ok[ok.mean_response_published.astype(bool)]
    err = ok.error_pct.abs()
    text = (f"{len(ok)} of {len(p)} runs simulated ({int(p.steps.iloc[0])} timed steps each under the framework's schedule, the synchronous baseline or, for NeMo RL's one-step-off rows, async; uncalibrated: "
            f"a GPU's own kernel table where one ships, else the default cost parameters): median |step-time error| {err.median():.0f}%, worst {err.max():.0f}%")
    past = ok[ok.memory_check != "fits"]
    if len(past):
        fits = ok[ok.memory_check == "fits"]
        text += (f"; † {len(past)} runs the memory check refuses (the framework ran them, so they fit there) are "
                 f"timed past it with ZeRO-3 — over the {len(fits)} that fit: median {fits.error_pct.abs().median():.0f}%, "
                 f"worst {fits.error_pct.abs().max():.0f}%")
    if len(stated) and len(stated) < len(ok):
        text += (f"; over the {len(stated)} with a published mean response length: median "
                 f"{stated.error_pct.abs().median():.0f}%, worst {stated.error_pct.abs().max():.0f}%")
    bad = ok[ok.contradicted.astype(str) == "True"]
    if len(bad):
        good = ok[ok.contradicted.astype(str) != "True"]
        text += (f"; ‡ {len(bad)} runs whose published stage times would need more than 100% of the GPUs' peak for the "
                 f"assumed lengths (the source contradicts the assumption) — without them: median "
                 f"{good.error_pct.abs().median():.0f}%, worst {good.error_pct.abs().max():.0f}%")
    ranged = ok[ok.predicted_step_low_s.notna()]
    if len(ranged):
        at = {c: ok[c].where(ok[c].notna(), ok.error_pct).abs().median() for c in ("error_low_pct", "error_high_pct")}
        text += (f"; with the {len(ranged)} assumed mean response lengths halved / raised by half: median "
                 f"{at['error_low_pct']:.0f}% / {at['error_high_pct']:.0f}%")
    spread = ok[ok.predicted_step_spread_low_s.notna()]
    if len(spread):
        at = {c: ok[c].where(ok[c].notna(), ok.error_pct).abs().median()
              for c in ("error_spread_low_pct", "error_spread_high_pct")}
        text += (f"; with the {len(spread)} synthetic length spreads halved / raised by half: median "
                 f"{at['error_spread_low_pct']:.0f}% / {at['error_spread_high_pct']:.0f}%")
    held = ok[ok.calibration == "held out"]
    if len(held):
        fitted = int((ok.calibration == "fit").sum())
        text += (f". Calibration check, kept apart from the numbers above: one step-time factor "
                 f"({p.calibration_factor.iloc[0]:.2f}) fitted on the {fitted} simulated NeMo RL runs; on the "
                 f"{len(held)} other runs the median |error| goes from {held.error_pct.abs().median():.0f}% to "
                 f"{held.calibrated_error_pct.abs().median():.0f}%")
    waiting = p[p.status.str.startswith("needs")]
    refused = p[p.status.str.startswith("refused")]
    if len(refused):
        text += f". Not simulated: {', '.join(f'`{k}`' for k in refused.key)}"
    if len(waiting):
        text += (". Waiting for table ids: "
                 + "; ".join(f"`{r.key}` ({r.status.removeprefix('needs ')})" for r in waiting.itertuples()))
    return _md(pd.DataFrame(rows)) + "\n\n" + text + "."


def published_changelog() -> str:
    """Changes made after the published table was seen, with its median before and after
    (``paper_figs/published_changelog.py``)."""
    from paper_figs.published_changelog import CHANGES

    rows = [{"date": c.date, "kind": c.kind, "change": c.what.replace("|", "\\|"),
             "median abs. error": f"{c.median_before:.1f}% → {c.median_after:.1f}%",
             "worst abs. error": f"{c.worst_before:.1f}% → {c.worst_after:.1f}%", "note": c.note.replace("|", "\\|")}
            for c in CHANGES]
    return _md(pd.DataFrame(rows))


def _first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    first = first.split(". ")[0].rstrip(".").replace("``", "`")
    for sep in (": ", " — ", "; ", " ("):
        if len(first) > 110 and sep in first[30:]:
            first = first[: 30 + first[30:].index(sep)]
    return (first if len(first) <= 130 else first[:127] + "…").replace("|", "\\|")


def layout() -> str:
    """One line per module of both packages, from the first sentence of its docstring."""
    rows = []
    for pkg in ("oppo_sim", "oppo_real"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.name == "__init__.py" and path.stat().st_size == 0:
                continue
            rows.append({"module": f"`{path.relative_to(ROOT).as_posix()}`", "what it holds": _first_line(path)})
    return _md(pd.DataFrame(rows))


def model_table() -> str:
    """The simulator's model table (``oppo_sim.hw.models.lookup.MODELS``), every count derived from the shape."""
    from oppo_sim.hw.models.lookup import MODELS

    rows = []
    for m in MODELS.values():
        kind = ("MoE " + f"{m.experts}×top-{m.experts_per_token}" if m.moe else "dense") + (", MLA" if m.mla else "")
        kind += f", {m.full_attn_layers} attention + {m.mixer_layers} constant-state layers" if m.mixer_layers else ""
        kind += ", VLM: text backbone" if "vision tower" in m.note else ""
        rows.append({"id": f"`{m.id}`", "model": m.name, "kind": kind, "layers": m.layers, "hidden": m.hidden,
                     "heads / KV heads": f"{m.heads} / {m.kv_heads}", "parameters": f"{m.params / 1e9:.2f}B",
                     "active per token": f"{m.active_params / 1e9:.2f}B",
                     "KV cache per token": f"{m.kv_bytes_per_token() / 1024:.0f} KiB"})
    return _md(pd.DataFrame(rows))


def gpu_table() -> str:
    """The simulator's GPU table (``oppo_sim.hw.devices.hardware.GPUS``): datasheet numbers, links one direction per GPU."""
    from oppo_sim.hw.devices.hardware import GPUS, GiB

    rows = [{"id": f"`{g.id}`", "GPU": g.name, "bf16 dense TFLOPS": f"{g.peak_flops / 1e12:,.0f}",
             "memory GB/s": f"{g.mem_bw / 1e9:,.0f}", "memory GiB": f"{g.mem_bytes / GiB:.1f}",
             "link GB/s": f"{g.link_bw / 1e9:,.0f}", "host GB/s": f"{g.host_bw / 1e9:,.0f}",
             "network GB/s": f"{g.net_bw / 1e9:,.1f}", "NVLink domain": g.nvlink_domain,
             "host time / op": f"{g.host_op_scale:.2f}x"}
            for g in GPUS.values()]
    return _md(pd.DataFrame(rows))


SCALING_SERIES = ("verl-fullyasync-colocate-32xh20", "verl-fullyasync-colocate-64xh20", "verl-fullyasync-colocate-128xh20")
"""One recipe on 32, 64 and 128 GPUs (verl's fully-async page, its "colocate sync" rows): the published series."""


def scaling_series() -> str:
    """Speed-up per doubling of GPUs, stage by stage, published beside predicted (``published_runs.csv``): what a
    series of one recipe says about the model apart from any single run's lengths."""
    p = pd.read_csv(OUT / "published_runs.csv").set_index("key").loc[list(SCALING_SERIES)]
    stages = (("gen", "generation"), ("old_log_prob", "scoring"), ("update_actor", "training"), ("step", "step"))
    rows = []
    for small, large in zip(SCALING_SERIES, SCALING_SERIES[1:]):
        a, b = p.loc[small], p.loc[large]
        row = {"GPUs": f"{int(a.devices)} → {int(b.devices)}"}
        for timer, col in stages:
            pub, pred = f"published_{col}_s", f"predicted_{col}_s"
            row[f"{timer}: published / predicted"] = f"{a[pub] / b[pub]:.2f}× / {a[pred] / b[pred]:.2f}×"
        rows.append(row)
    return _md(pd.DataFrame(rows))


OVERLAP_PAIRS = (("nemo-v0.5-llama3.1-8b-16xh100", "nemo-v0.5-llama3.1-8b-16xh100-1off"),
                 ("nemo-v0.5-qwen3-30b-a3b-32xh100", "nemo-v0.5-qwen3-30b-a3b-32xh100-1off"),
                 ("nemo-v0.5-llama3.1-8b-8xgb200", "nemo-v0.5-llama3.1-8b-8xgb200-1off"))
"""NeMo RL's on-policy and one-step-off rows of one recipe on the same GPUs: what overlapping bought, published."""

GB200_PAIRS = (("nemo-v0.5-llama3.1-8b-16xh100", "nemo-v0.5-llama3.1-8b-8xgb200"),
               ("nemo-v0.5-qwen3-32b-32xh100", "nemo-v0.5-qwen3-32b-16xgb200"),
               ("nemo-v0.5-qwen3-30b-a3b-32xh100", "nemo-v0.5-qwen3-30b-a3b-16xgb200"),
               ("nemo-v0.5-qwen3-235b-a22b-128xh100", "nemo-v0.5-qwen3-235b-a22b-64xgb200"),
               ("nemo-v0.5-deepseek-v3-256xh100", "nemo-v0.5-deepseek-v3-128xgb200"))
"""NeMo RL's on-policy rows of one recipe on H100 and on GB200-NVL72."""


def _pair_rows(pairs, label, ratio) -> str:
    p = pd.read_csv(OUT / "published_runs.csv").set_index("key")
    rows = []
    for a, b in pairs:
        x, y = p.loc[a], p.loc[b]
        pub, pred = ratio(x, y, "published_step_s"), ratio(x, y, "predicted_step_s")
        rows.append({"recipe": f"{x.model}, {label(x, y)}", "published": f"{pub:.2f}×", "predicted": f"{pred:.2f}×",
                     "predicted / published − 1": _signed(100.0 * (pred / pub - 1.0))})
    return _md(pd.DataFrame(rows))


def overlap_pairs() -> str:
    """Step-time speed-up of NeMo RL's one-step-off rows over its on-policy rows on the same GPUs, published beside
    predicted (``published_runs.csv``): the gain from overlapping generation with training."""
    return _pair_rows(OVERLAP_PAIRS, lambda x, y: f"{int(x.devices)}× {x.gpu}",
                      lambda x, y, c: x[c] / y[c])


def gb200_pairs() -> str:
    """Per-GPU speed of GB200 over H100 on NeMo RL's on-policy recipes: H100 step x GPUs over GB200 step x GPUs."""
    return _pair_rows(GB200_PAIRS, lambda x, y: f"{int(x.devices)} H100 / {int(y.devices)} GB200",
                      lambda x, y, c: (x[c] * x.devices) / (y[c] * y.devices))


def _roundtrip_rows(tag: str) -> tuple[list[dict], str]:
    import json

    name = f"check_roundtrip_{tag}"
    rows, meta = pd.read_csv(OUT / f"{name}.csv"), json.loads((OUT / f"{name}.json").read_text())
    out = [{"run": tag, "pair": int(r.repeat) + 1,
            "others' cores (baseline / oppo)": f"{r.others_cores_baseline:.2f} / {r.others_cores_oppo:.2f}",
            "held-out step error": f"{r.heldout_step_err_pct:.1f}%",
            "measured speedup": f"{r.measured_speedup:.3f}",
            "predicted (range)": f"{r.predicted_speedup:.3f} ({r.predicted_lo:.3f}–{r.predicted_hi:.3f})",
            "pred − meas": _signed(r.speedup_err_pct), "in range": "yes" if r.in_range else "no"} for r in rows.itertuples()]
    s, z = meta["summary"], meta["sizes"]
    lo, hi = s["heldout_step_err_pct_range"]
    note = (f"**{tag}** (`{meta['command']}`, {meta['date']}, commit `{meta['commit']}`, {z['steps']} steps x "
            f"{z['repeats']} pairs, B={z['batch']}, K={z['calibrate']}, {z.get('workers', 'inline')} workers): held-out median step error "
            f"{s['heldout_step_err_pct_median']:.1f}% ({lo:.1f}–{hi:.1f}% over the pairs); oppo's speedup measured "
            f"{s['measured_speedup_pooled']:.3f} over all pairs ({s['measured_speedup_range'][0]:.3f}–"
            f"{s['measured_speedup_range'][1]:.3f} pair by pair), predicted {s['predicted_speedup_median']:.3f} "
            f"(median range {s['predicted_range_median'][0]:.3f}–{s['predicted_range_median'][1]:.3f}), "
            f"{_signed(s['pooled_speedup_err_pct'])} off; {s['repeats_in_range']} of {s['repeats']} pairs inside "
            f"their range; other processes kept {s['others_cores_during_runs'][0]:.2f}–"
            f"{s['others_cores_during_runs'][1]:.2f} of the {meta['cpus']} cores busy during the runs")
    d = meta.get("driver_overheads")
    note += (f"; simulated with the driver's measured costs ({1e3 * d['call_s']:.2f} ms a generation round trip, "
             f"{1e3 * d['step_s']:.2f} ms a step, {1e3 * d['sample_s']:.3f} ms a sample)." if d else
             "; simulated without the driver's costs per round trip.")
    note += (" Calibrated from the engines' measured profile (`oppo-real profile --backend torch`)."
             if meta.get("start_profile", "nominal") != "nominal" else " Calibrated from this CPU's nominal spec.")
    return out, note


def check_roundtrip() -> str:
    """The CPU round trip of ``oppo-sim check`` (``paper_figs/out/check_roundtrip_TAG.csv/.json``, written by
    ``benchmarks/bench_check_roundtrip.py --tag``): on Ray workers on a quiet machine (from the engines' profile, from
    the nominal spec, without the driver's measured costs), on in-process threads, then the earlier sets whose workers ran every call in turn (idle, then
    loaded) — kept to show what that did."""
    rows, notes = [], []
    for tag in ("quiet", "quiet-nominal", "quiet-no-driver", "local", "inline", "inline-loaded"):
        if not (OUT / f"check_roundtrip_{tag}.csv").exists():
            continue
        r, n = _roundtrip_rows(tag)
        rows += r
        notes.append(n)
    return _md(pd.DataFrame(rows)) + "\n\n" + "\n\n".join(notes)


TABLES: dict[str, Callable[[], str]] = {
    "layout": layout, "models": model_table, "gpus": gpu_table, "algorithms": algorithms,
    "predictions": predictions, "parity": parity, "parity-run-a": parity_run_a, "paper-vs-ours": paper_vs_ours,
    "plan-paper": plan_paper, "plan-32b": plan_32b,
    "published-runs": published_runs, "published-changelog": published_changelog, "check-roundtrip": check_roundtrip,
    "scaling-series": scaling_series, "overlap-pairs": overlap_pairs, "gb200-pairs": gb200_pairs,
}
