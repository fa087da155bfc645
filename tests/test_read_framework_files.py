"""``scripts/read_framework_files.py``: every file of a directory through the readers, one step each; the shipped
fixtures all read, a file verl would refuse is refused with oppo-sim's one-line reason, and the CSV says which."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from read_framework_files import files_of, main  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "frameworks"


def test_fixtures_read_and_a_typo_is_refused_with_its_reason(tmp_path, capsys):
    verl = tmp_path / "verl"
    shutil.copytree(FIX / "verl", verl)
    (verl / "bad.sh").write_text("python3 -m verl.trainer.main_ppo data.train_batchsize=32 actor_rollout_ref.rollout.n=4\n")
    (verl / "docker").mkdir()
    (verl / "docker" / "build.sh").write_text("docker build .\n")  # not a job: skipped
    out = tmp_path / "files.csv"
    assert main(["--verl", str(verl), "--nemo-rl", str(FIX / "nemo_rl"), "--out", str(out)]) == 0
    df = pd.read_csv(out)
    assert len(df) == len(files_of("verl", verl)) + len(files_of("nemo-rl", FIX / "nemo_rl"))
    assert not df["file"].str.contains("docker").any()
    refused = df[df.status == "refused"]
    assert list(refused["file"].map(lambda f: Path(f).name)) == ["bad.sh"]
    assert "did you mean data.train_batch_size" in refused.iloc[0]["reason"]
    assert (df[df.status == "ok"]["step_time_s"] > 0).all()
    assert "1 refused or crashed" in capsys.readouterr().out
