"""Tests for oppo_sim.traces.trace: loading, validation errors, search path, cap, cyclic replay."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oppo_sim.core.errors import ConfigError, OppoError, TraceError
from oppo_sim.traces.catalog import (
    available_traces,
    find_trace,
    load_trace,
    package_data_dir,
    trace_search_path,
)
from oppo_sim.traces.trace import DEFAULT_MAX_RESPONSE, DEFAULT_TRACE, Trace

PROMPTS = [12, 7, 300, 1, 45]
RESPONSES = [5, 9000, 1, 64, 20000]


def write_text(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def csv_text(rows: list[tuple[object, ...]], header: str = "prompt_tokens,response_tokens") -> str:
    return header + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows)


def good_frame() -> pd.DataFrame:
    return pd.DataFrame({
        "prompt_tokens": PROMPTS,
        "response_tokens": RESPONSES,
        "timestamp": [0.0, 0.5, 0.5, 2.0, 3.25],
        "reward": [0.1, -0.2, 0.3, 0.0, 1.0],
        "step": [0, 0, 1, 1, 2],
        "ignored": ["a", "b", "c", "d", "e"],
    })


# --------------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".jsonl", ".jsonl.gz", ".parquet"])
def test_round_trip_formats(tmp_path: Path, suffix: str) -> None:
    frame = good_frame()
    path = tmp_path / f"t{suffix}"
    if suffix.startswith(".csv"):
        write_text(path, frame.to_csv(index=False))
    elif suffix.startswith(".jsonl"):
        write_text(path, frame.to_json(orient="records", lines=True))
    else:
        frame.to_parquet(path, index=False)
    trace = load_trace(path, max_response=None)
    assert trace.name == "t"
    assert trace.source == str(path)
    assert len(trace) == 5
    out = trace.to_frame()
    assert list(out.columns) == ["prompt_tokens", "response_tokens", "timestamp", "reward", "step"]
    pd.testing.assert_frame_equal(out, frame.drop(columns="ignored"), check_dtype=False)
    assert trace.prompt_tokens.dtype == np.int64 and trace.step.dtype == np.int64
    assert trace.timestamp.dtype == np.float64 and trace.reward.dtype == np.float64


def test_gzip_detected_without_suffix(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_bytes(gzip.compress(csv_text([(1, 2)]).encode()))
    assert load_trace(path).row(0) == (1, 2)


def test_to_frame_only_present_columns() -> None:
    trace = Trace.from_arrays([1, 2], [3, 4])
    assert list(trace.to_frame().columns) == ["prompt_tokens", "response_tokens"]


def test_limit(tmp_path: Path) -> None:
    # rows after the limit are not read, so a bad row there does not matter
    path = write_text(tmp_path / "l.csv", csv_text([(1, 2), (3, 4), (5, -1)]))
    assert len(load_trace(path, limit=2)) == 2
    with pytest.raises(ConfigError):
        load_trace(path, limit=0)


# --------------------------------------------------------------------------------------------------
# Native column names
# --------------------------------------------------------------------------------------------------


def test_azure_native_columns(tmp_path: Path) -> None:
    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:15:46.6805900,374,44\n"
            "2023-11-16 18:15:50.9951690,396,109\n"
            "2023-11-16 18:15:51.6805900,879,45\n")
    trace = load_trace(write_text(tmp_path / "AzureLLMInferenceTrace_conv.csv", text))
    assert trace.prompt_tokens.tolist() == [374, 396, 879]
    assert trace.response_tokens.tolist() == [44, 109, 45]
    assert trace.timestamp == pytest.approx([0.0, 4.314579, 5.0])


def test_mooncake_native_columns(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [1, 2, 3]},
            {"timestamp": 1500, "input_length": 7322, "output_length": 490, "hash_ids": [4]}]
    path = write_text(tmp_path / "conversation_trace.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    trace = load_trace(path)
    assert trace.prompt_tokens.tolist() == [6758, 7322]
    assert trace.response_tokens.tolist() == [500, 490]
    assert trace.timestamp.tolist() == [0.0, 1.5]  # milliseconds -> seconds


# --------------------------------------------------------------------------------------------------
# Validation errors: one line, file, row, column
# --------------------------------------------------------------------------------------------------


def assert_one_line(exc: pytest.ExceptionInfo[BaseException], *parts: str) -> None:
    msg = str(exc.value)
    assert "\n" not in msg
    for part in parts:
        assert part in msg, f"{part!r} not in {msg!r}"


@pytest.mark.parametrize("cell,expected", [
    ("abc", "non-integer value 'abc'"),
    ("3.5", "non-integer value 3.5"),
    ("-3", "negative length -3"),
    ("", "empty cell"),
    ("0", "zero-length response"),
    ("inf", "non-integer value"),
])
def test_bad_response_cell_csv(tmp_path: Path, cell: str, expected: str) -> None:
    rows = [(10, 20)] * 16 + [(10, cell)] + [(10, 20)] * 3
    path = write_text(tmp_path / "bad.csv", csv_text(rows))
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "bad.csv", "row 17", "'response_tokens'", expected)


@pytest.mark.parametrize("cell,expected", [("0", "zero-length prompt"), ("-1", "negative length -1"),
                                           ("x", "non-integer value 'x'"), ("", "empty cell")])
def test_bad_prompt_cell_csv_gz(tmp_path: Path, cell: str, expected: str) -> None:
    rows = [(10, 20), (10, 20), (cell, 20)]
    path = write_text(tmp_path / "badp.csv.gz", csv_text(rows))
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "badp.csv.gz", "row 3", "'prompt_tokens'", expected)


def test_first_bad_row_is_reported(tmp_path: Path) -> None:
    rows = [(10, 20)] * 5 + [(10, "1.5"), (10, "abc"), (10, "")]
    with pytest.raises(TraceError) as exc:
        load_trace(write_text(tmp_path / "f.csv", csv_text(rows)))
    assert_one_line(exc, "row 6", "non-integer value")


def test_bad_jsonl_rows(tmp_path: Path) -> None:
    good = json.dumps({"prompt_tokens": 3, "response_tokens": 4})
    path = write_text(tmp_path / "b.jsonl", "\n".join([good, good, '{"prompt_tokens": 3, "response_tokens": -2}']))
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "b.jsonl", "row 3", "'response_tokens'", "negative length -2")

    path = write_text(tmp_path / "c.jsonl", "\n".join([good, "{not json", good]))
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "c.jsonl", "row 2", "invalid JSON")

    path = write_text(tmp_path / "d.jsonl", "\n".join([good, '{"prompt_tokens": 3}']))
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "d.jsonl", "row 2", "'response_tokens'", "empty cell")

    path = write_text(tmp_path / "e.jsonl", "\n".join([good, '{"prompt_tokens": 3, "response_tokens": "many"}']))
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "e.jsonl", "row 2", "'response_tokens'", "non-integer value 'many'")


def test_bad_parquet_row(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pd.DataFrame({"prompt_tokens": [1, 2, 3], "response_tokens": [4.0, np.nan, 6.0]}).to_parquet(path)
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "p.parquet", "row 2", "'response_tokens'", "empty cell")


def test_native_column_named_in_error(tmp_path: Path) -> None:
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,374,0\n"
    with pytest.raises(TraceError) as exc:
        load_trace(write_text(tmp_path / "az.csv", text))
    assert_one_line(exc, "az.csv", "row 1", "'GeneratedTokens'", "zero-length response")


def test_bad_optional_columns(tmp_path: Path) -> None:
    cases = [
        ("step", "-1", "negative step -1"),
        ("step", "0.5", "non-integer value 0.5"),
        ("reward", "nan", "empty cell"),
        ("timestamp", "-2", "negative timestamp"),
    ]
    for column, cell, expected in cases:
        text = f"prompt_tokens,response_tokens,{column}\n1,2,0\n1,2,{cell}\n"
        with pytest.raises(TraceError) as exc:
            load_trace(write_text(tmp_path / f"o_{column}.csv", text))
        assert_one_line(exc, f"o_{column}.csv", "row 2", f"'{column}'", expected)


def test_missing_column_lists_found(tmp_path: Path) -> None:
    path = write_text(tmp_path / "m.csv", "prompt_tokens,output,extra\n1,2,3\n")
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "m.csv", "missing required column 'response_tokens'", "prompt_tokens, output, extra")


@pytest.mark.parametrize("content,expected", [
    (b"", "empty file"),
    (b"\n\n", "empty file"),
    (b"prompt_tokens,response_tokens\n", "no data rows"),
    (bytes(range(256)) * 8, "not a text file"),
    (b"\xff\xfe\xfa garbage \xc3\x28", "not a UTF-8 text file"),
])
def test_unreadable_or_empty_csv(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "u.csv"
    path.write_bytes(content)
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "u.csv", expected)


def test_bad_gzip(tmp_path: Path) -> None:
    path = tmp_path / "g.csv.gz"
    path.write_bytes(gzip.compress(csv_text([(1, 2)] * 100).encode())[:40])  # truncated
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "g.csv.gz", "gzip")
    path.write_bytes(b"prompt_tokens,response_tokens\n1,2\n")  # .gz name, not gzip
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "g.csv.gz", "not gzip-compressed")


def test_bad_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "x.parquet", "cannot read as Parquet")


def test_ragged_csv(tmp_path: Path) -> None:
    path = write_text(tmp_path / "r.csv", "prompt_tokens,response_tokens\n1,2\n1,2,3,4\n")
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert_one_line(exc, "r.csv", "cannot parse as CSV")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read mode-000 files")
def test_permission_denied(tmp_path: Path) -> None:
    path = write_text(tmp_path / "locked.csv", csv_text([(1, 2)]))
    path.chmod(0)
    try:
        with pytest.raises(TraceError) as exc:
            load_trace(path)
        assert_one_line(exc, "locked.csv", "permission denied")
    finally:
        path.chmod(0o600)


def test_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="is a directory"):
        find_trace(tmp_path)


def test_errors_are_oppo_errors() -> None:
    assert issubclass(TraceError, OppoError) and issubclass(ConfigError, OppoError)


def test_large_file_is_fast_and_reports_late_bad_row(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"prompt_tokens": rng.integers(1, 4000, 50_000),
                          "response_tokens": rng.integers(1, 9000, 50_000)})
    frame.loc[49_321, "response_tokens"] = 0
    path = tmp_path / "big.csv.gz"
    frame.to_csv(path, index=False)
    start = time.perf_counter()
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert time.perf_counter() - start < 2.0
    assert_one_line(exc, "big.csv.gz", "row 49322", "zero-length response")


# --------------------------------------------------------------------------------------------------
# Trace object: cyclic rows, cap, head, describe, from_arrays validation
# --------------------------------------------------------------------------------------------------


def test_row_is_cyclic() -> None:
    trace = Trace.from_arrays(PROMPTS, RESPONSES)
    n = len(trace)
    for i in range(3 * n):
        assert trace.row(i) == (PROMPTS[i % n], RESPONSES[i % n])
    assert isinstance(trace.row(7)[0], int)
    with pytest.raises(ConfigError):
        trace.row(-1)
    prompts, responses = trace.take(12, start=3)
    assert [trace.row(3 + k) for k in range(12)] == list(zip(prompts.tolist(), responses.tolist()))


@given(st.lists(st.integers(1, 50_000), min_size=1, max_size=60), st.integers(1, 30_000))
@settings(max_examples=60, deadline=None)
def test_cap_counting(responses: list[int], cap: int) -> None:
    trace = Trace.from_arrays([1] * len(responses), responses)
    capped = trace.capped(cap)
    raw = np.array(responses)
    assert capped.max_response == cap
    assert capped.n_clipped == int((raw > cap).sum())
    assert np.array_equal(capped.response_tokens, np.minimum(raw, cap))
    assert np.array_equal(capped.clipped, raw > cap)
    # a looser cap afterwards changes nothing; a tighter one counts against the raw lengths
    assert capped.capped(cap + 1) is capped
    tighter = capped.capped(max(1, cap // 2))
    assert tighter.n_clipped == int((raw > max(1, cap // 2)).sum())


def test_load_applies_default_cap(tmp_path: Path) -> None:
    path = write_text(tmp_path / "c.csv", csv_text(list(zip(PROMPTS, RESPONSES))))
    trace = load_trace(path)
    assert DEFAULT_MAX_RESPONSE == 8192
    assert trace.max_response == DEFAULT_MAX_RESPONSE
    assert trace.n_clipped == 2
    assert trace.response_tokens.max() == DEFAULT_MAX_RESPONSE
    raw = load_trace(path, max_response=None)
    assert raw.max_response is None and raw.n_clipped == 0 and raw.response_tokens.max() == 20000
    assert load_trace(path, max_response=100).n_clipped == 2
    with pytest.raises(ConfigError):
        load_trace(path, max_response=0)


def test_head() -> None:
    trace = Trace.from_arrays(PROMPTS, RESPONSES, step=[0, 0, 1, 1, 2]).capped(100)
    head = trace.head(2)
    assert len(head) == 2 and head.step.tolist() == [0, 0] and head.n_clipped == 1
    assert trace.head(99) is trace
    with pytest.raises(ConfigError):
        trace.head(0)


def test_describe() -> None:
    trace = Trace.from_arrays([10, 20, 30, 40], [1, 2, 3, 100])
    d = trace.describe()
    assert set(d) == {"rows", "resp_mean", "resp_p50", "resp_p90", "resp_p99", "resp_max", "p99_over_p50",
                      "prompt_mean", "prompt_p50"}
    assert d["rows"] == 4 and d["resp_p50"] == 2.5 and d["resp_max"] == 100 and d["prompt_p50"] == 25
    assert d["resp_p99"] == pytest.approx(pd.Series([1, 2, 3, 100]).quantile(0.99))


def test_trace_is_immutable() -> None:
    source = np.array([1, 2, 3])
    trace = Trace.from_arrays(source, source)
    source[0] = 99
    assert trace.prompt_tokens[0] == 1
    with pytest.raises(ValueError):
        trace.prompt_tokens[0] = 5
    with pytest.raises(AttributeError):
        trace.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize("kwargs,expected", [
    (dict(prompt=[1, 0], response=[1, 1]), "row 2, column 'prompt_tokens': zero-length prompt"),
    (dict(prompt=[1, 1], response=[1, 0]), "row 2, column 'response_tokens': zero-length response"),
    (dict(prompt=[1, 2.5], response=[1, 1]), "non-integer value 2.5"),
    (dict(prompt=[1, 1], response=[1]), "has 1 rows"),
    (dict(prompt=[], response=[]), "no rows"),
    (dict(prompt=[1], response=[1], step=[-1]), "negative step -1"),
    (dict(prompt=[1], response=[1], reward=[np.inf]), "non-finite"),
    (dict(prompt=[1], response=[1], timestamp=[np.nan]), "empty cell"),
])
def test_from_arrays_validation(kwargs: dict[str, object], expected: str) -> None:
    prompt, response = kwargs.pop("prompt"), kwargs.pop("response")
    with pytest.raises(TraceError) as exc:
        Trace.from_arrays(prompt, response, name="arr", **kwargs)
    assert_one_line(exc, "array:arr", expected)


def test_from_arrays_rejects_unknown_argument() -> None:
    with pytest.raises(ConfigError, match="unknown"):
        Trace.from_arrays([1], [1], rewards=[0.0])


# --------------------------------------------------------------------------------------------------
# Search path, find_trace, available_traces, the shipped traces
# --------------------------------------------------------------------------------------------------


def test_oppo_traces_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    write_text(second / "mine.jsonl", json.dumps({"prompt_tokens": 2, "response_tokens": 3}) + "\n")
    monkeypatch.setenv("OPPO_TRACES", os.pathsep.join([str(first), str(second)]))
    path = trace_search_path()
    assert path[:2] == [first, second]
    assert find_trace("mine") == second / "mine.jsonl"
    assert load_trace("mine").row(0) == (2, 3)
    catalog = available_traces()
    assert "mine" in set(catalog["name"])
    # an earlier directory shadows a later one
    write_text(first / "mine.csv", csv_text([(5, 6)]))
    assert load_trace("mine").row(0) == (5, 6)
    assert catalog is not None and available_traces().query("name == 'mine'")["shadowed"].tolist() == [False, True]


def test_search_path_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPPO_TRACES", raising=False)
    monkeypatch.chdir(tmp_path)
    path = trace_search_path()
    assert path == [tmp_path / "traces", package_data_dir()]
    assert package_data_dir().name == "data" and package_data_dir().parent.name == "oppo_sim"
    (tmp_path / "traces").mkdir()
    write_text(tmp_path / "traces" / "local.csv.gz", csv_text([(1, 1)]))
    assert load_trace("local").name == "local"


def test_not_found_lists_directories(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPPO_TRACES", str(tmp_path))
    with pytest.raises(TraceError) as exc:
        find_trace("no-such-trace-anywhere")
    assert_one_line(exc, "no-such-trace-anywhere", str(tmp_path), "oppo_sim")
    with pytest.raises(TraceError, match="not found"):
        find_trace(str(tmp_path / "sub" / "missing.csv"))


def test_relative_path_and_suffix_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    write_text(tmp_path / "d" / "x.csv", csv_text([(4, 5)]))
    assert load_trace("d/x.csv").row(0) == (4, 5)
    assert load_trace("d/x").row(0) == (4, 5)


def test_default_trace_loads_from_any_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPPO_TRACES", raising=False)
    monkeypatch.chdir(tmp_path)
    trace = load_trace(DEFAULT_TRACE)
    assert trace.name == DEFAULT_TRACE
    assert len(trace) == 4000
    d = trace.describe()
    assert 250 <= d["resp_p50"] <= 350
    assert 8 <= d["p99_over_p50"] <= 12
    assert d["resp_max"] <= 4096
    assert trace.step is not None and trace.step[0] == 0 and trace.step[-1] > 0
    assert trace.response_tokens[-1000:].mean() > trace.response_tokens[:1000].mean()
    assert Path(trace.source).stat().st_size < 60_000


# name -> (rows, resp p50, p99/p50, resp max) from traces/README.md (uncapped)
PUBLIC = {
    "azure2023_code": (8819, 13, 19.34, 1899),
    "azure2023_conv": (19366, 129, 4.66, 1000),
    "mooncake_conversation": (12031, 350, 3.20, 2000),
    "servegen_deepseek_r1_sampled": (50000, 788, 15.72, 30354),
}


@pytest.fixture
def nothing_beside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no ./traces, no ../shared beside it, and no OPPO_TRACES: only what ships."""
    monkeypatch.delenv("OPPO_TRACES", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_traces_ship_and_match_readme(nothing_beside: Path, name: str) -> None:
    rows, p50, ratio, rmax = PUBLIC[name]
    assert find_trace(name).parent == package_data_dir()
    trace = load_trace(name, max_response=None)
    d = trace.describe()
    assert d["rows"] == rows
    assert d["resp_p50"] == p50
    assert d["p99_over_p50"] == pytest.approx(ratio, abs=0.01)
    assert d["resp_max"] == rmax
    assert trace.timestamp is not None and trace.timestamp.min() >= 0


def test_every_shipped_trace_is_in_the_readme_and_the_notice() -> None:
    readme = (Path(__file__).resolve().parents[1] / "traces" / "README.md").read_text()
    notice = (package_data_dir() / "NOTICE").read_text()
    names = {p.name for p in package_data_dir().glob("*.csv.gz")}
    assert set(f"{n}.csv.gz" for n in PUBLIC) < names
    for name in names:
        assert f"`{name.removesuffix('.csv.gz')}`" in readme, name
        assert name in notice, name


def test_the_package_data_globs_ship_every_data_file() -> None:
    """What ``[tool.setuptools.package-data]`` lists is what a wheel holds: every file in oppo_sim/data."""
    import fnmatch

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["oppo_sim"]
    data = package_data_dir()
    missing = [p.name for p in data.iterdir() if p.is_file()
               and not any(fnmatch.fnmatch(p.relative_to(data.parent).as_posix(), g) for g in globs)]
    assert not missing, f"oppo_sim/data files a wheel would leave out: {missing}"


def test_public_trace_by_name_and_default_cap(nothing_beside: Path) -> None:
    trace = load_trace("servegen_deepseek_r1_sampled")
    assert trace.max_response == DEFAULT_MAX_RESPONSE
    raw = load_trace("servegen_deepseek_r1_sampled", max_response=None)
    assert trace.n_clipped == int((raw.response_tokens > DEFAULT_MAX_RESPONSE).sum()) > 0
    assert load_trace("azure2023_conv").describe()["resp_p50"] == 129


def test_a_local_trace_shadows_a_shipped_one(nothing_beside: Path) -> None:
    (nothing_beside / "traces").mkdir()
    write_text(nothing_beside / "traces" / "azure2023_conv.csv", csv_text([(7, 8)]))
    assert load_trace("azure2023_conv").row(0) == (7, 8)
    rows = available_traces().query("name == 'azure2023_conv'")
    assert rows["shadowed"].tolist() == [False, True] and rows["rows"].tolist() == [1, 19366]


def test_pmf_is_rejected_clearly(nothing_beside: Path) -> None:
    with pytest.raises(TraceError) as exc:
        load_trace("servegen_deepseek_r1_length_pmf")
    assert_one_line(exc, "servegen_deepseek_r1_length_pmf", "PMF", "tokens,p_prompt,p_response",
                    "servegen_deepseek_r1_sampled")


def test_pmf_detected_in_any_file(tmp_path: Path) -> None:
    path = write_text(tmp_path / "dist.csv", "tokens,p_prompt,p_response\n1,0.5,0.5\n2,0.5,0.5\n")
    with pytest.raises(TraceError, match="PMF"):
        load_trace(path)


def test_available_traces(nothing_beside: Path) -> None:
    catalog = available_traces()
    assert list(catalog.columns) == ["name", "path", "rows", "kind", "shadowed"]
    by_name = catalog.drop_duplicates("name").set_index("name")
    assert by_name.loc["azure2023_conv", "rows"] == 19366
    assert by_name.loc["servegen_deepseek_r1_length_pmf", "kind"] == "pmf"
    assert by_name.loc[DEFAULT_TRACE, "rows"] == 4000


@given(st.lists(st.tuples(st.integers(1, 10**7), st.integers(1, 10**7)), min_size=1, max_size=40),
       st.sampled_from([".csv", ".csv.gz", ".jsonl"]))
@settings(max_examples=40, deadline=None)
def test_round_trip_property(tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, int]],
                             suffix: str) -> None:
    trace = Trace.from_arrays([p for p, _ in rows], [r for _, r in rows], name="prop")
    path = tmp_path_factory.mktemp("rt") / f"prop{suffix}"
    frame = trace.to_frame()
    text = frame.to_csv(index=False) if suffix.startswith(".csv") else frame.to_json(orient="records", lines=True)
    write_text(path, text)
    loaded = load_trace(path, max_response=None, max_prompt=None)  # raw lengths: neither cap
    assert np.array_equal(loaded.prompt_tokens, trace.prompt_tokens)
    assert np.array_equal(loaded.response_tokens, trace.response_tokens)


def test_bad_cell_in_numeric_timestamp_column(tmp_path: Path) -> None:
    text = "prompt_tokens,response_tokens,timestamp\n1,2,0.5\n1,2,soon\n"
    with pytest.raises(TraceError) as exc:
        load_trace(write_text(tmp_path / "ts.csv", text))
    assert_one_line(exc, "ts.csv", "row 2", "'timestamp'", "non-numeric value 'soon'")


def test_bad_azure_datetime(tmp_path: Path) -> None:
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,2\nyesterday,1,2\n"
    with pytest.raises(TraceError) as exc:
        load_trace(write_text(tmp_path / "azd.csv", text))
    assert_one_line(exc, "azd.csv", "row 2", "'TIMESTAMP'", "'yesterday'")
