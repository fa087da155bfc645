"""Megatron-Bridge's published pre-training throughput, the BF16 rows on GPUs the simulator has kernel tables for
(H100, B200, GB200), as records: the trainer alone, priced by ``pretrain_check.py``.

Source: ``docs/performance-summary-archive.md`` of NVIDIA-NeMo/Megatron-Bridge at :data:`COMMIT` (the NeMo
containers 25.11 to 26.04.01). Every row there is Megatron-Core pre-training with routing force-balanced over the
experts and no token dropping, sequences of the stated length packed one to a sample; FP8 and MXFP8 rows are left
out (the simulator prices BF16 kernels), as are GB300 and B300 (no table). Each record keeps the table's line.
"""

from __future__ import annotations

from dataclasses import dataclass

COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"
SOURCE = f"https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{COMMIT}/docs/performance-summary-archive.md"
GPU_IDS = {"DGX-H100": "h100-sxm", "DGX-B200": "b200", "DGX-GB200": "gb200"}
GPUS_PER_NODE = {"h100-sxm": 8, "b200": 8, "gb200": 4}  # a GB200 compute tray holds 4 GPUs
MODEL_IDS = {"GPT OSS 120B": "gpt-oss-120b", "DeepSeekV3 (w/o MTP)": "deepseek-v3", "Qwen3_235B_a22B": "qwen3-235b-a22b"}


@dataclass(frozen=True)
class PretrainRow:
    """One row: its container release, system, model and layout as the table gives them, and its throughput."""

    line: int  # the row's line in the source file
    release: str  # NeMo container
    system: str
    model: str
    gpus: int
    gbs: int  # global batch, sequences
    mbs: int  # micro-batch, sequences
    seq: int  # sequence length, tokens
    tp: int
    pp: int
    cp: int
    vp: int  # virtual pipeline stages (the table's n/a: 1)
    ep: int
    tokens_per_s_per_gpu: float

    @property
    def gpu(self) -> str:
        return GPU_IDS[self.system]

    @property
    def model_id(self) -> str:
        return MODEL_IDS[self.model]

    @property
    def nodes(self) -> int:
        return self.gpus // GPUS_PER_NODE[self.gpu]

    @property
    def key(self) -> str:
        return f"{self.release} {self.system} {self.model}"


def _row(line: int, release: str, system: str, model: str, *v: float) -> PretrainRow:
    gpus, gbs, mbs, seq, tp, pp, cp, vp, ep, tok = v
    return PretrainRow(line, release, system, model, int(gpus), int(gbs), int(mbs), int(seq), int(tp), int(pp), int(cp),
                       int(vp), int(ep), float(tok))


G = "GPT OSS 120B"
ROWS: tuple[PretrainRow, ...] = (
    _row(235, "26.04.01", "DGX-GB200", G, 64, 1280, 4, 4096, 1, 1, 1, 1, 64, 16640),
    _row(237, "26.04.01", "DGX-B200", G, 64, 1280, 4, 4096, 1, 1, 1, 1, 8, 13568),
    _row(238, "26.04.01", "DGX-H100", G, 64, 1280, 1, 4096, 1, 4, 1, 1, 8, 5824),
    _row(335, "26.04", "DGX-GB200", G, 64, 1280, 4, 4096, 1, 1, 1, 1, 64, 15938),
    _row(337, "26.04", "DGX-B200", G, 64, 1280, 4, 4096, 1, 1, 1, 1, 8, 13045),
    _row(338, "26.04", "DGX-H100", G, 64, 1280, 1, 4096, 1, 4, 1, 1, 8, 5810),
    _row(432, "26.02.01", "DGX-GB200", G, 64, 1280, 4, 4096, 1, 1, 1, 1, 64, 15754),
    _row(434, "26.02.01", "DGX-B200", G, 64, 1280, 4, 4096, 1, 1, 1, 1, 8, 13722),
    _row(435, "26.02.01", "DGX-H100", G, 64, 1280, 1, 4096, 1, 4, 1, 1, 8, 5984),
    _row(517, "26.02", "DGX-GB200", G, 64, 1280, 4, 4096, 1, 1, 1, 1, 64, 15784),
    _row(519, "26.02", "DGX-B200", G, 64, 1280, 4, 4096, 1, 1, 1, 1, 64, 8047),
    _row(520, "26.02", "DGX-H100", G, 64, 1280, 1, 4096, 1, 4, 1, 1, 8, 5993),
    _row(568, "25.11", "DGX-GB200", "DeepSeekV3 (w/o MTP)", 256, 4096, 1, 4096, 1, 4, 1, 4, 64, 3139),
    _row(570, "25.11", "DGX-GB200", G, 64, 1280, 1, 8192, 1, 1, 1, 1, 64, 15876),
    _row(572, "25.11", "DGX-GB200", "Qwen3_235B_a22B", 256, 8192, 1, 4096, 1, 8, 1, 3, 32, 4916),
    _row(581, "25.11", "DGX-B200", G, 64, 512, 4, 4096, 1, 1, 1, 1, 8, 8213),
    _row(592, "25.11", "DGX-H100", G, 64, 512, 4, 4096, 1, 4, 1, 1, 8, 5630),
)
"""The rows, in the source's order."""
