#!/usr/bin/env bash
# The GPU measurement of issue 9, in one command from the repository root:
#
#   bash scripts/gpu_measure.sh OUT [PYTHON]          # PYTHON defaults to python3
#
# Needs: a CUDA GPU, torch >= 2.9 with its transformers (5.x), pandas, numpy, scipy, matplotlib, and simpy
# (pure Python: if it is not installed, a wheel in ./.whl or $OPPO_WHEELS is put on PYTHONPATH; make one
# where pip works with `python3 -m pip download --no-deps simpy -d .whl`). No network, no vLLM, no Ray:
# the torch backend on local workers. Budget: about 10 minutes per shape on one H100 (OPPO_GPU_BUDGET_S,
# default 1500 s: each stage is cut to what is left, so the collection always runs; OPPO_GPU_SHAPES picks the
# shapes). Every process decodes throw-away requests for 45 s before it times anything (--engine-warmup).
#
# Stages (each writes its outputs before the next starts; a failed stage is logged and the next runs):
#   1. environment: torch / transformers / GPU                         -> OUT/stages/env.txt
#   2. profile the Qwen2.5-0.5B and -1.5B shapes: every op measured vs the uncalibrated prediction of the
#      GPU table's entry (default cost parameters), then the fit     -> OUT/stages/profile-<shape>/
#   3. validate baseline,intra,inter,oppo on each shape (while the budget lasts) -> OUT/stages/validate-<shape>/
#   4. collect (scripts/gpu_collect.py): OUT/gpu_profile.csv (device name in every row), gpu_fit.csv,
#      gpu_profile.png, gpu_validation.csv, gpu_parity.png, gpu_timelines.png, gpu_summary.json,
#      gpu_measure.log — eight files, what a device machine hands back.
set -u
OUT="${1:?usage: bash scripts/gpu_measure.sh OUT [PYTHON]}"
PY="${2:-python3}"
BUDGET="${OPPO_GPU_BUDGET_S:-1500}"
mkdir -p "$OUT/stages"
LOG="$OUT/gpu_measure.log"
: > "$LOG"
export PYTHONUNBUFFERED=1
export OPPO_MODEL_CACHE="${OPPO_MODEL_CACHE:-/tmp/oppo-gpu-models}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
say() { echo "[gpu_measure $(elapsed)s] $*" | tee -a "$LOG"; }

if ! "$PY" -c "import simpy" 2>/dev/null; then
    for whl in "${OPPO_WHEELS:-.whl}"/simpy-*.whl; do
        [ -f "$whl" ] && export PYTHONPATH="$PWD/$whl:$PYTHONPATH" && say "simpy from $whl"
    done
fi

stage() {  # stage NAME SECONDS command...: run, log, record the status; never stops the script
    local name="$1" limit="$2"; shift 2
    local left=$(( BUDGET - $(elapsed) - 45 ))   # a stage ends in time for the collect stage
    if [ "$name" != collect ] && [ "$left" -lt "$limit" ]; then limit=$left; fi
    if [ "$(elapsed)" -ge "$BUDGET" ] || [ "$limit" -le 0 ]; then say "SKIP $name (budget of ${BUDGET}s spent)"; echo "$name skipped" >> "$OUT/stages/status.txt"; return; fi
    say "START $name: $*"
    timeout "$limit" "$@" >> "$LOG" 2>&1
    local rc=$?
    say "END $name rc=$rc"
    echo "$name rc=$rc" >> "$OUT/stages/status.txt"
}

: > "$OUT/stages/status.txt"
stage env 120 "$PY" -c "
import torch, transformers, platform, sys
print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)
ok = torch.cuda.is_available()
print('gpu', torch.cuda.get_device_name(0) if ok else 'none', 'memory_gib', round(torch.cuda.mem_get_info(0)[1] / 2**30, 1) if ok else 0)
import simpy; print('simpy', simpy.__version__)
sys.exit(0 if ok else 3)
"
cp "$LOG" "$OUT/stages/env.txt"

CLI=("$PY" -m oppo_real.cli)
DEVICE="${OPPO_GPU_DEVICE:-cuda}"          # cpu + OPPO_GPU_SHAPES=tiny + OPPO_GPU_QUICK=1: a smoke test of this script
SHAPES="${OPPO_GPU_SHAPES:-qwen2.5-0.5b qwen2.5-1.5b}"
QUICK="${OPPO_GPU_QUICK:-0}"
shape_args() { [ "$1" = tiny ] || echo --shape "$1"; }
for shape in $SHAPES; do
    extra=()
    [ "$QUICK" = 1 ] && extra=(--quick --gpu h100-sxm)
    # shellcheck disable=SC2046
    stage "profile-$shape" 300 "${CLI[@]}" profile --device "$DEVICE" --backend torch $(shape_args "$shape") "${extra[@]}" \
        --out "$OUT/stages/profile-$shape"
done

COMMON=(validate --device "$DEVICE" --backend torch --workers local --policies baseline,intra,inter,oppo --no-checkpoint
        --trace oppo-longtail-default --chunk 64 --delta 4)
size() {  # batch, steps, length scale, max response per shape (sized to fit an 80 GB GPU and the time budget)
    if [ "$QUICK" = 1 ]; then echo "--batch 4 --steps 3 --length-scale 0.1 --max-response 32 --warmup 1"; return; fi
    case "$1" in
        qwen2.5-0.5b) echo "--batch 16 --steps 6 --warmup 1 --length-scale 0.2 --max-response 256" ;;
        *) echo "--batch 8 --steps 5 --warmup 1 --length-scale 0.2 --max-response 192" ;;
    esac
}
for shape in $SHAPES; do
    prof=()
    [ -f "$OUT/stages/profile-$shape/profile.json" ] && prof=(--profile "$OUT/stages/profile-$shape/profile.json")
    # shellcheck disable=SC2046
    stage "validate-$shape" 600 "${CLI[@]}" "${COMMON[@]}" $(shape_args "$shape") "${prof[@]}" $(size "$shape") \
        --out "$OUT/stages/validate-$shape"
done

stage collect 120 "$PY" scripts/gpu_collect.py "$OUT"
say "done; status:"; cat "$OUT/stages/status.txt" | tee -a "$LOG"
