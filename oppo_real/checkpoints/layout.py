"""What a real run's checkpoint directory holds, and the order its files are written in so that a crash
at any moment leaves a consistent checkpoint behind.

    <out>/checkpoint/
        train-v<N>.pt   the trainer at policy version N: actor, critic, both optimizers, torch's RNG
                        and N itself (written by the train worker under a temporary name, then renamed)
        driver.json     the ledger, the samples, the records so far, the trainings in flight, and the
                        name, version and size of the weights file it belongs to

**Write order.** The weights first (complete and renamed: ``train-v<N>.pt.tmp`` -> ``train-v<N>.pt``),
then ``driver.json`` (the *ledger*, written last: ``.tmp`` + rename), then the weights files no ledger
names any more are removed. Each file's data reaches the disk (``fsync``) before its rename.

**Why the previous pair is kept rather than a mismatch refused.** A crash between the two writes leaves
the old ``driver.json`` naming the old weights file, and that file is still on disk (it is removed only
once the new ``driver.json`` is in place). A resume therefore continues from the last consistent step —
losing at most the step whose checkpoint was being written — instead of stopping a run that can go on.
The new, orphaned weights file is removed by the next checkpoint. A ``driver.json`` whose weights file
is missing, has another size, or holds another version than it records is still refused with one line:
weights and ledger of different versions are never loaded together.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from oppo_sim.core.errors import ConfigError

CHECKPOINT_FORMAT = "oppo-real-checkpoint/4"
LEDGER_NAME = "driver.json"
_WEIGHTS_RE = re.compile(r"^train-v(\d+)\.pt(\.tmp)?$")


def weights_name(version: int) -> str:
    """The weights file of policy version ``version``."""
    return f"train-v{version}.pt"


@dataclass(frozen=True)
class WeightsRef:
    """The weights file a ledger belongs to: its name, the policy version inside it, its size in bytes."""

    file: str
    version: int
    bytes: int

    @classmethod
    def of(cls, directory: Path, version: int) -> "WeightsRef":
        name = weights_name(version)
        return cls(name, version, (directory / name).stat().st_size)


def write_atomic(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` entirely or keeps what it held: a temporary file, fsync, then a rename."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_ledger(directory: Path, state: dict[str, Any], weights: WeightsRef) -> None:
    """Write ``driver.json`` (the last write of a checkpoint), naming ``weights``; then remove every weights
    file that neither it nor ``state['training']`` (the trainings in flight) needs."""
    doc = {"format": CHECKPOINT_FORMAT, "weights": asdict(weights), **state}
    write_atomic(directory / LEDGER_NAME, json.dumps(doc).encode())
    keep = {weights.file} | {j["weights"] for j in state.get("training", ()) if j.get("weights")}
    for f in directory.iterdir():  # (a kept file may still be being written, under its .tmp name)
        if _WEIGHTS_RE.match(f.name) and f.name.removesuffix(".tmp") not in keep:
            f.unlink(missing_ok=True)


def read_ledger(directory: Path) -> tuple[dict[str, Any], WeightsRef]:
    """``driver.json`` and the weights file it names (checked: present, of the recorded size); one-line
    ``ConfigError`` otherwise. The version inside the weights is checked when the trainer loads them."""
    path = directory / LEDGER_NAME
    if not path.exists():
        raise ConfigError(f"{directory}: no checkpoint ({LEDGER_NAME} missing)")
    st = json.loads(path.read_text())
    if st.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{path}: not an {CHECKPOINT_FORMAT} checkpoint (format {st.get('format')!r})")
    ref = WeightsRef(**st.pop("weights"))
    wpath = directory / ref.file
    if not wpath.exists():
        raise ConfigError(f"{path}: its weights {ref.file} (policy version {ref.version}) are missing; "
                          f"the checkpoint cannot be resumed")
    if wpath.stat().st_size != ref.bytes:
        raise ConfigError(f"{path}: {ref.file} has {wpath.stat().st_size} bytes, the ledger recorded {ref.bytes}; "
                          f"weights and ledger are not one checkpoint")
    return st, ref


def check_version(ref: WeightsRef, ledger_version: int, loaded_version: int) -> None:
    """The weights loaded, the file's recorded version and the ledger's policy version must be one version."""
    if not loaded_version == ref.version == ledger_version:
        raise ConfigError(f"checkpoint mismatch: {ref.file} holds policy version {loaded_version}, the ledger "
                          f"records {ref.version} and its policy is at version {ledger_version}; refusing to resume")


def has_checkpoint(out_dir: Path) -> bool:
    return (out_dir / "checkpoint" / LEDGER_NAME).exists()
