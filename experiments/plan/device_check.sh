#!/usr/bin/env bash
# The device check (experiments/plan/device_check.py) on a bare, offline CUDA machine whose
# python3 holds torch, transformers, accelerate, peft and lightning but not the rest:
#   bash experiments/plan/device_check.sh         there, with .device/ (make device-wheels)
#   DRY=1 bash experiments/plan/device_check.sh   here: the local .venv, tiny shapes, CPU
# Each part runs under its own time limit (about 6.5 min in all) and prints what it measured
# before the next starts; device_check.txt (the results) and device_check.log (everything
# else) go to $OUT, or outputs/device/ when OUT is unset.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-outputs/device}
mkdir -p "$OUT"
RESULTS=$OUT/device_check.txt
LOG=$OUT/device_check.log
: >"$RESULTS"
: >"$LOG"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled MPLBACKEND=Agg
export HF_HOME=${TMPDIR:-/tmp}/paperlab-device-hf PYTHONUNBUFFERED=1
if [ -n "${DRY:-}" ]; then
  PY=.venv/bin/python SIZE=tiny DEVICE=cpu
else
  PY=python3 SIZE=real DEVICE=cuda
  SITE=${TMPDIR:-/tmp}/paperlab-site
  if ! $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" .device/wheels/*.whl >>"$LOG" 2>&1; then
    echo "the wheels in .device/wheels did not install (see $LOG)" | tee -a "$RESULTS"
    exit 1
  fi
  export PYTHONPATH=$SITE
fi
{
  echo "device check $(date -u +%FT%TZ): $SIZE shapes on $DEVICE, commit" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  $PY -c "import torch; print('  torch', torch.__version__, 'CUDA', torch.version.cuda, \
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')" 2>>"$LOG"
} | tee -a "$RESULTS"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/paperlab-device-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failed=0
run_part() { # name, time limit in seconds
  local start=$SECONDS rc
  echo "== $1 (limit $2 s)" | tee -a "$RESULTS"
  timeout --kill-after=10 "$2" $PY -m experiments.plan.device_check --part "$1" \
    --size "$SIZE" --device "$DEVICE" --work "$WORK" --results "$RESULTS" 2>>"$LOG"
  rc=$?
  if [ "$rc" != 0 ]; then
    failed=1
    echo "  $1 failed (exit $rc$([ "$rc" = 124 ] && echo ': over its limit')):" \
      "$(tail -n 1 "$LOG")" | tee -a "$RESULTS"
  fi
  echo "  $1: $((SECONDS - start)) s" | tee -a "$RESULTS"
}
run_part lm_steps 150
run_part presets 150
run_part cpu_papers 90
exit $failed
