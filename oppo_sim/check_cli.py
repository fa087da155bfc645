"""``oppo-sim check``: a run's log against the simulator, stage by stage; ``--calibrate K`` fits the run's profile
on its first K steps and reports the error on the others; ``--policies`` says what each policy would buy on
the run, with a range.

    oppo-sim check --from-verl run_qwen2-7b.sh --log train.log [--framework verl|verl-0.7|nemo-rl|nemo-rl-async|openrlhf]
        [--steps-from N] [--steps-to M] [--calibrate K --write-profile P.json] [--policies baseline,oppo,async]
        [--plot check.png] [--csv check.csv]

The comparison: :mod:`oppo_sim.frameworks.check_run`; the fit: :mod:`oppo_sim.frameworks.check_fit`; the
what-if and its range: :mod:`oppo_sim.frameworks.check_policies`; the figure: :mod:`oppo_sim.frameworks.check_plot`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from oppo_sim.cliargs import figure_path, file_path, nonneg_int, output, positive, str_list


def add_check_parser(sub, add_run_like: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``check`` (``add_run_like``: the run options of ``run``, framework readers included)."""
    from oppo_sim.frameworks.stages import FRAMEWORKS

    p = sub.add_parser("check", help="a run's log against the simulator, stage by stage; calibrate on it; what-if")
    add_run_like(p)
    c = p.add_argument_group("the run's log (the config: --from-verl/--from-openrlhf/--from-nemo-rl and the options above)")
    c.add_argument("--log", required=True, metavar="PATH",
                   help="the run's log: verl console lines, NeMo RL console, a wandb/TensorBoard CSV, a JSONL (required)")
    c.add_argument("--run", default=None, metavar="NAME", help="the run of a wandb CSV holding several (default: the only one)")
    c.add_argument("--framework", choices=FRAMEWORKS, default=None,
                   help="whose stage timers the log holds (default: the log's; a verl log without "
                        "timing_s/update_weights is verl-0.7)")
    c.add_argument("--steps-from", type=nonneg_int, default=None, metavar="N", help="first logged step checked (default: the first)")
    c.add_argument("--steps-to", type=nonneg_int, default=None, metavar="M", help="last logged step checked (default: the last)")
    c.add_argument("--policy", default=None,
                   help="the schedule the run used (default: the framework reader's, else baseline)")
    c.add_argument("--config-framework", default=None, metavar="NAME",
                   help="the framework the config was read from; --from-verl/--from-openrlhf/--from-nemo-rl set it, "
                        "and a log of another framework is refused (default: none)")
    f = p.add_argument_group("calibration, what-if and output")
    f.add_argument("--calibrate", type=positive(), default=None, metavar="K",
                   help="fit the run's profile on its first K checked steps; the error is reported on the others "
                        "(default: no fit, the hardware given)")
    f.add_argument("--write-profile", default=None, metavar="P.json",
                   help="write the fitted profile (run/compare/plan --profile take it); needs --calibrate (default: not written)")
    f.add_argument("--policies", type=str_list, default=None,
                   help="what each policy would buy on this run, with a range, e.g. baseline,intra,inter,oppo,async "
                        "(default: not predicted)")
    f.add_argument("--plot", type=figure_path, default=None, help="write the figure, PNG/PDF/SVG (default: not written)")
    f.add_argument("--csv", type=file_path, default=None, help="write the per-step, per-stage table (default: not written)")
    p.set_defaults(func=cmd_check)


def _ticker(total: int, desc: str):
    """A progress bar's update function and its closer (silent when stderr is not a terminal)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return (lambda: None), (lambda: None)
    bar = tqdm(total=total, desc=desc, unit="sim", leave=False, disable=not sys.stderr.isatty())
    return (lambda: bar.update(1)), bar.close


def prepare(a: argparse.Namespace):
    """(The run to check, read from ``a``'s log and config; the hardware given, before any fit.)"""
    from oppo_sim.cli_policy import check_policy_flags, policy_options
    from oppo_sim.cli_setup import sim_config
    from oppo_sim.core.errors import ConfigError
    from oppo_sim.frameworks.check_run import CheckRun, check_config_framework, measured_timers, select_steps, stage_map
    from oppo_sim.traces.runlog import RunLog, lengths, read_run_log

    from oppo_sim.traces.trace import DEFAULT_TRACE

    if a.write_profile and not a.calibrate:
        raise ConfigError("--write-profile needs --calibrate K (the profile is the fit)")
    if a.trace != DEFAULT_TRACE or a.steps != 20:  # run's defaults: check's lengths and steps are the log's
        raise ConfigError(f"{'--trace' if a.trace != DEFAULT_TRACE else '--steps'}: check simulates the logged steps "
                          "with their logged lengths; choose them with --steps-from/--steps-to")
    log = read_run_log(a.log, a.run)
    check_config_framework(log, a.config_framework)
    framework = stage_map(log, a.framework)
    log = select_steps(log, a.steps_from, a.steps_to)
    with_lengths = set(lengths(log)["step"])
    log = RunLog(log.table[log.table["step"].isin(with_lengths)].reset_index(drop=True), log.framework, log.format,
                 log.source)
    measured_timers(log, framework)  # refuses a log without timers
    policy = (a.policy or "baseline").strip().lower()
    check_policy_flags(a, [policy, *(a.policies or ())])
    cfg = sim_config(a)
    run = CheckRun(log, framework, cfg, policy, tuple(policy_options(a).items()))
    return run, cfg.hardware_of(cfg.placement.generate)


def _cell(m: float, p: float, e: float) -> str:
    return f"{m:.3g} / {p:.3g} ({e:+.0f}%)"


def _print_steps(table: pd.DataFrame) -> None:
    cells = table.assign(cell=[_cell(m, p, e) for m, p, e in zip(table["measured_s"], table["predicted_s"],
                                                                    table["error_pct"])])
    wide = cells.pivot(index="step", columns="stage", values="cell")[list(dict.fromkeys(table["stage"]))]
    wide.columns = [c.split("/", 1)[-1] if c.count("/") else c for c in wide.columns]
    wide.index.name = "logged step"
    if "part" in table.columns:
        wide.insert(0, "part", table.groupby("step")["part"].first())
    print("per step and stage: measured / predicted seconds (error %)")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 40):
        print(wide.reset_index().to_string(index=False))


def _print_summary(table: pd.DataFrame, label: str) -> None:
    from oppo_sim.frameworks.check_run import summary

    s = summary(table)
    print(f"\n{label}: median |error| per stage")
    with pd.option_context("display.width", 250, "display.float_format", "{:.3f}".format):
        print(s.to_string(index=False))


def _fit(a, run, base):
    from oppo_sim.frameworks.check_fit import fit, params_table

    tick, close = _ticker(40, "calibrating")
    try:
        f = fit(run, base, a.calibrate, tick)
    finally:
        close()
    print(f"calibrated on steps {run.steps[0]}..{run.steps[a.calibrate - 1]} ({f.simulations} simulations):")
    with pd.option_context("display.width", 250, "display.float_format", "{:.4g}".format, "display.max_colwidth", 80):
        print(params_table(f).to_string(index=False))
    if f.at_bound:
        print(f"at the bound (efficiency 1: the run is faster than the nominal spec allows): {', '.join(f.at_bound)}")
    return f


@dataclass(frozen=True)
class Checked:
    """What one ``check`` found: the run, the fit (``None`` without ``--calibrate``), the per-step long table
    (``part`` says calibration / held-out after a fit) and the what-if (``None`` without ``--policies``)."""

    run: object
    fit: object
    table: pd.DataFrame
    policies: pd.DataFrame | None


def cmd_check(a: argparse.Namespace) -> int:
    evaluate(a)
    return 0


def evaluate(a: argparse.Namespace) -> Checked:
    """``check`` as the command runs it (printing as it goes), its results returned."""
    from oppo_sim.frameworks.check_run import compare, predicted_timers, unmapped

    run, base = prepare(a)
    print(f"log {run.log.source}: {run.log.framework} ({run.log.format}), steps {run.steps[0]}..{run.steps[-1]} "
          f"({len(run.steps)}); stage map {run.framework}; simulated: policy {run.policy}, B={run.cfg.batch} x "
          f"n={run.cfg.algorithm.n}, {base.label}")
    f = _fit(a, run, base) if a.calibrate else None
    hw = f.hardware() if f else base
    table, untimed = compare(run.measured(), predicted_timers(run, hw, f.step_s if f else 0.0))
    if f:
        cut = run.steps[a.calibrate - 1]
        table.insert(1, "part", ["calibration" if s <= cut else "held-out" for s in table["step"]])
    if untimed:
        print(f"logged but not simulated (no such work in the simulated run): {', '.join(untimed)}")
    if unmapped(run.log, run.framework):
        print(f"logged, outside {run.framework}'s stage map (in the step, so in the fixed step cost): "
              f"{', '.join(unmapped(run.log, run.framework))}")
    print()
    _print_steps(table)
    if f:
        _print_summary(table[table["part"] == "calibration"], "calibration steps")
        _print_summary(table[table["part"] == "held-out"], "held-out steps (after K)")
    else:
        _print_summary(table, "all steps (uncalibrated)")
    policies = _policies(a, run, base, f, table)
    _outputs(a, run, f, table, policies)
    return Checked(run, f, table, policies)


def _policies(a, run, base, f, table):
    if not a.policies:
        return None
    from oppo_sim.frameworks.check_policies import range_note, step_noise, what_if

    names = list(a.policies)
    tick, close = _ticker((len(names) + ("baseline" not in names)) * (5 if f else 3), "policies")
    try:
        out = what_if(run, base, f, names, tick, noise=step_noise(table, run.framework)[0])
    finally:
        close()
    print(f"\nwhat each policy would buy on this run ({'calibrated' if f else 'uncalibrated'} model, steps "
          f"{run.steps[0]}..{run.steps[-1]}):")
    with pd.option_context("display.width", 250, "display.float_format", "{:.3f}".format):
        print(out.to_string(index=False))
    print(range_note(out))
    return out


def _outputs(a, run, f, table, policies) -> None:
    if a.csv:
        table.to_csv(output(a.csv), index=False)
        print(f"table: {a.csv}")
    if a.write_profile:
        from oppo_sim.frameworks.check_run import summary
        from oppo_sim.frameworks.check_fit import write_profile
        from oppo_sim.hw.fitting.profiles import profile_meta

        held = summary(table[table["part"] == "held-out"])
        write_profile(f, a.write_profile, run, dict(zip(held["stage"], held["median_abs_error_pct"].astype(float))),
                      profile_meta(a.profile or a.gpu))
        print(f"profile: {a.write_profile} (run/compare/plan --profile {a.write_profile})")
    if a.plot:
        from oppo_sim.frameworks.check_plot import plot_check

        shown = table[table["part"] == "held-out"] if f else table
        title = f"{run.framework} stages, {'held-out steps' if f else 'all steps'}: measured vs predicted"
        plot_check(shown, title, policies).savefig(output(a.plot), dpi=120, bbox_inches="tight")
        print(f"figure: {a.plot}")


__all__ = ["Checked", "add_check_parser", "cmd_check", "evaluate", "prepare"]
