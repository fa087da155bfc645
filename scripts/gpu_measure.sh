#!/usr/bin/env bash
# The GPU measurement of issues 9 and 19, from the repository root:
#
#   bash scripts/gpu_measure.sh OUT [PYTHON]                  # every stage in order, within OPPO_GPU_BUDGET_S
#   bash scripts/gpu_measure.sh OUT [PYTHON] --stage NAME     # one stage, then collect: one device-machine call
#   bash scripts/gpu_measure.sh OUT [PYTHON] --stage list     # the stage names
#
# Needs: a CUDA GPU, torch >= 2.9 with its transformers (5.x), pandas, numpy, scipy, matplotlib, and simpy
# (pure Python: if it is not installed, a wheel in ./.whl or $OPPO_WHEELS is put on PYTHONPATH; make one
# where pip works with `python3 -m pip download --no-deps simpy -d .whl`). No network, no vLLM, no Ray:
# the torch-graph backend (decode replayed as CUDA graphs) on local workers. A device machine allows 10
# minutes per command: each stage is cut at OPPO_STAGE_S (default 540 s) so that it and the collection fit
# one call; a whole run is cut to OPPO_GPU_BUDGET_S (default 1500 s). Every process that decodes first
# decodes throw-away requests for 45 s (--engine-warmup; OPPO_ENGINE_WARMUP_S sets it for the profile stages).
# OPPO_GPU_COLLECT=0: a --stage call skips the collection (run `--stage collect` later, on any machine).
# Models are random-weight Qwen2.5 shapes in bf16, built once into $OPPO_MODEL_CACHE (default /tmp/oppo-gpu-models; 7B: ~30 GB of disk for actor + reward);
# a profile or validate stage builds its shape's models if they are not there (a fresh machine has none).
#
# Stages (SHAPE: 1.5b, 3b, 7b, also 0.5b; moe = qwen3-moe-2.8b-a0.5b, 128 experts top-8; tiny or moe-tiny for
# a CPU smoke test; each writes OUT/stages/<dir>/; docs/gpu.md lists what to run in which order):
#   env                    torch / transformers / GPU                                  -> stages/env.txt
#   models-SHAPE           build the shape's models (so a profile stage spends its call measuring)
#   profile-SHAPE-OP       OP = decode | prefill | train | sync, on torch-graph: every call vs the uncalibrated
#                          prediction of the GPU table's entry, the fit, the held-out fit; decode rows with
#                          their kernel share                             -> stages/profile-qwen2.5-SHAPE--OP/
#   profile-SHAPE-decode-torch   the same decode grid on the per-request torch backend (kernel share before)
#   profile-SHAPE-decode-eager   the same decode grid on torch-graph with --no-cuda-graphs (the same engine, eager)
#                          (every profile stage's output is also kept in its folder's profile.log, so a stage cut
#                          before it wrote its table still leaves its grid points for scripts/gpu_collect.py)
#   sleepwake-SHAPE        the engine's weights and KV cache to pinned host memory and back, the trainer's
#                          state (fp32 weights, grads, Adam; a stated shard where it does not fit) offloaded
#                          and reloaded: GiB/s and fixed cost per direction   -> stages/moves-<id>--sleepwake/
#   sync-SHAPE             the weights device-to-device, to pinned host and back -> stages/moves-<id>--sync/
#   validate-SHAPE         baseline,intra,inter,oppo on torch-graph, the engine resident (OPPO_VALIDATE_COLOCATE=sleep:
#                          asleep while training), with the merged profile of the shape (this
#                          run's, else OPPO_VALIDATE_PROFILE, a path in which {id} stands for the shape's id),
#                          --repeat OPPO_VALIDATE_REPEAT (default 3) runs per policy, interleaved
#   collect                scripts/gpu_collect.py: OUT/gpu_profile.csv (device name in every row, kernel_share),
#                          gpu_fit.csv, gpu_fit_heldout.csv, gpu_profile.png, gpu_validation.csv, gpu_parity.png,
#                          gpu_timelines.png, gpu_moves.csv, gpu_moves_fit.csv, gpu_summary.json, gpu_measure.log
# Without --stage: env, then for each of OPPO_GPU_SHAPES (default "1.5b 3b 7b moe") its profile stages (four
# for a dense shape, decode and prefill for moe), its sleepwake and sync stages (dense shapes), then
# validate-1.5b and validate-3b, then collect (a failed stage is logged and the next runs).
set -u
OUT="${1:?usage: bash scripts/gpu_measure.sh OUT [PYTHON] [--stage NAME]}"
shift
PY=python3
if [ $# -gt 0 ] && [ "$1" != --stage ]; then PY="$1"; shift; fi
ONLY=""
if [ $# -gt 0 ]; then [ "$1" = --stage ] && [ $# -ge 2 ] || { echo "usage: ... --stage NAME" >&2; exit 2; }; ONLY="$2"; fi
BUDGET="${OPPO_GPU_BUDGET_S:-1500}"
STAGE_S="${OPPO_STAGE_S:-540}"
DEVICE="${OPPO_GPU_DEVICE:-cuda}"          # cpu + a tiny shape + OPPO_GPU_QUICK=1: a smoke test of this script
QUICK="${OPPO_GPU_QUICK:-0}"
WARMUP="${OPPO_ENGINE_WARMUP_S:-}"         # seconds of throw-away decoding before a profile's decode (default: the CLI's)
COLLECT="${OPPO_GPU_COLLECT:-1}"           # 0: --stage NAME does not collect after it (collect later, anywhere)
mkdir -p "$OUT/stages"
LOG="$OUT/gpu_measure.log"
[ -n "$ONLY" ] || : > "$LOG"
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

run() {  # run NAME SECONDS command...: run, log, record the status; never stops the script. With TEE_TO set,
    # the command's output also goes to that file (a profile stage's profile.log: what a cut stage printed is kept)
    local name="$1" limit="$2"; shift 2
    local left=$(( BUDGET - $(elapsed) - 45 ))   # a stage ends in time for the collect stage
    if [ -z "$ONLY" ] && [ "$name" != collect ] && [ "$left" -lt "$limit" ]; then limit=$left; fi
    if [ "$limit" -le 0 ]; then say "SKIP $name (budget of ${BUDGET}s spent)"; echo "$name skipped" >> "$OUT/stages/status.txt"; return; fi
    say "START $name: $*"
    local rc
    if [ -n "${TEE_TO:-}" ]; then
        mkdir -p "$(dirname "$TEE_TO")"
        timeout "$limit" "$@" 2>&1 | tee -a "$TEE_TO" >> "$LOG"
        rc=${PIPESTATUS[0]}
    else
        timeout "$limit" "$@" >> "$LOG" 2>&1
        rc=$?
    fi
    say "END $name rc=$rc"
    echo "$name rc=$rc" >> "$OUT/stages/status.txt"
}

shape_id() { case "$1" in tiny) echo tiny ;; moe) echo qwen3-moe-2.8b-a0.5b ;; moe-tiny) echo qwen3-moe-tiny ;;
                        qwen*|llama*) echo "$1" ;; *) echo "qwen2.5-$1" ;; esac; }
shape_args() { [ "$1" = tiny ] || echo --shape "$1"; }
CLI=("$PY" -m oppo_real.cli)
quick_args() { [ "$QUICK" = 1 ] && echo --quick --gpu h100-sxm; }
warmup_args() { [ -n "$WARMUP" ] && echo --engine-warmup "$WARMUP"; }

stage_env() {
    run env 120 "$PY" -c "
import torch, transformers, platform, sys
ok = torch.cuda.is_available()
import simpy
lines = ['python ' + platform.python_version() + ' torch ' + torch.__version__ + ' cuda ' + str(torch.version.cuda)
         + ' transformers ' + transformers.__version__,
         'gpu ' + (torch.cuda.get_device_name(0) if ok else 'none') + ' memory_gib '
         + str(round(torch.cuda.mem_get_info(0)[1] / 2**30, 1) if ok else 0), 'simpy ' + simpy.__version__]
print(*lines, sep='\\n')
open('$OUT/stages/env.txt', 'w').write('\\n'.join(lines) + '\\n')
sys.exit(0 if ok or '$DEVICE' == 'cpu' else 3)
"
}

stage_models() {  # models-SHAPE
    local id; id=$(shape_id "$1")
    [ "$id" = tiny ] && { run "models-$1" "$STAGE_S" "$PY" -c "from oppo_real.models.tiny import build_models, default_cache_dir; print(build_models(default_cache_dir()).root)"; return; }
    local dev=cuda; [ "$DEVICE" = cpu ] && dev=cpu
    run "models-$1" "$STAGE_S" "$PY" -c "
from oppo_real.models.shaped import build_shaped_models
from oppo_real.models.tiny import default_cache_dir
from oppo_real.profiling.model_shape import profile_shape
print(build_shaped_models(default_cache_dir(), profile_shape('$id'), device='$dev').root)"
}

stage_profile() {  # profile-SHAPE-OP[-torch|-eager]: torch-graph, the per-request torch engine, or torch-graph without graphs
    local shape="$1" op="$2" backend="${3:-torch-graph}" id suffix="" graphs=()
    id=$(shape_id "$shape")
    [ "$backend" = torch ] && suffix=-torch
    [ "$backend" = eager ] && { suffix=-eager; backend=torch-graph; graphs=(--no-cuda-graphs); }
    local dir="$OUT/stages/profile-$id--$op$suffix"
    # shellcheck disable=SC2046
    TEE_TO="$dir/profile.log" run "profile-$shape-$op$suffix" "$STAGE_S" "${CLI[@]}" profile --device "$DEVICE" --backend "$backend" \
        "${graphs[@]}" $(shape_args "$id") --ops "$op" $(quick_args) $(warmup_args) --out "$dir"
}

stage_validate() {  # validate-SHAPE
    local id; id=$(shape_id "$1")
    local prof=() size="--batch 8 --steps 5 --warmup 1 --length-scale 0.2 --max-response 192 --repeat ${OPPO_VALIDATE_REPEAT:-3}"
    [ "$QUICK" = 1 ] && size="--batch 4 --steps 3 --length-scale 0.1 --max-response 32 --warmup 1"
    [ -f "$OUT/stages/profile-$id/profile.json" ] && prof=(--profile "$OUT/stages/profile-$id/profile.json")
    # a profile measured earlier on this kind of GPU (e.g. paper_figs/out/gpu_h200/profile_<id>.json) when this run has none
    [ ${#prof[@]} -eq 0 ] && [ -n "${OPPO_VALIDATE_PROFILE:-}" ] && prof=(--profile "${OPPO_VALIDATE_PROFILE//\{id\}/$id}")
    # shellcheck disable=SC2046,SC2086
    # --colocate resident (OPPO_VALIDATE_COLOCATE): the engine keeps its KV cache and captured graphs between steps. Asleep,
    # torch-graph frees both and captures each (batch, length) bucket again at its first use after waking, ~0.1 s a
    # bucket inside the timed decode (the H200 run of 2026-11-27, docs/gpu.md); vLLM's sleep keeps its graphs valid.
    run "validate-$1" "$STAGE_S" "${CLI[@]}" validate --device "$DEVICE" --backend torch-graph --workers local \
        --colocate "${OPPO_VALIDATE_COLOCATE:-resident}" \
        --policies baseline,intra,inter,oppo --no-checkpoint --trace oppo-longtail-default --chunk 64 --delta 4 \
        $(shape_args "$id") "${prof[@]}" $size --out "$OUT/stages/validate-$id"
}

stage_moves() {  # sleepwake-SHAPE | sync-SHAPE: bulk copies at the shape's sizes (no model is built)
    local shape="$1" move="$2" id
    id=$(shape_id "$shape")
    # shellcheck disable=SC2046
    run "$move-$shape" "$STAGE_S" "${CLI[@]}" profile --device "$DEVICE" --moves "$move" $(shape_args "$id") $(quick_args) \
        --out "$OUT/stages/moves-$id--$move"
}

stage_collect() { run collect 120 "$PY" scripts/gpu_collect.py "$OUT"; }

stage() {  # stage NAME: dispatch one stage by name
    case "$1" in
        env) stage_env ;;
        collect) stage_collect ;;
        models-*) stage_models "${1#models-}" ;;
        profile-*-decode-torch) local s="${1#profile-}"; stage_profile "${s%-decode-torch}" decode torch ;;
        profile-*-decode-eager) local s="${1#profile-}"; stage_profile "${s%-decode-eager}" decode eager ;;
        profile-*-decode|profile-*-prefill|profile-*-train|profile-*-sync) local s="${1#profile-}"; stage_profile "${s%-*}" "${s##*-}" ;;
        validate-*) stage_validate "${1#validate-}" ;;
        sleepwake-*) stage_moves "${1#sleepwake-}" sleepwake ;;
        sync-*) stage_moves "${1#sync-}" sync ;;
        *) echo "unknown stage '$1' (try --stage list)" >&2; return 2 ;;
    esac
}

if [ "$ONLY" = list ]; then
    echo "env collect"
    for s in 1.5b 3b 7b; do echo "models-$s profile-$s-decode profile-$s-prefill profile-$s-train profile-$s-sync profile-$s-decode-torch profile-$s-decode-eager sleepwake-$s sync-$s validate-$s"; done
    echo "models-moe profile-moe-decode profile-moe-prefill"
    exit 0
fi
[ -f "$OUT/stages/status.txt" ] || : > "$OUT/stages/status.txt"
if [ -n "$ONLY" ]; then
    stage "$ONLY" || exit $?
    [ "$ONLY" = collect ] || [ "$COLLECT" = 0 ] || stage_collect
    exit 0
fi
: > "$OUT/stages/status.txt"
stage_env
SHAPES="${OPPO_GPU_SHAPES:-1.5b 3b 7b moe}"
for shape in $SHAPES; do
    case "$shape" in
        moe*) for op in decode prefill; do stage "profile-$shape-$op"; done ;;
        *) for op in decode prefill train sync; do stage "profile-$shape-$op"; done
           stage "sleepwake-$shape"; stage "sync-$shape" ;;
    esac
done
stage_collect  # merges each shape's per-op fits into the profile its validation predicts with
for shape in $SHAPES; do
    case "$shape" in 7b|moe*) ;; *) stage "validate-$shape" ;; esac
done
stage_collect
say "done; status:"; tee -a "$LOG" < "$OUT/stages/status.txt"
