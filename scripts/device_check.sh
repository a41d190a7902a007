#!/usr/bin/env bash
# The GPU stage (long_sequence_gpu) and the efficient rows on a CUDA machine: one prepared run, ~5 minutes at most.
#
#   bash scripts/device_check.sh            # from the repository root; writes to $OUT (or ./device_check_out)
#
# 1. reports the machine: nvidia-smi, python3, torch and whether it sees CUDA;
# 2. runs scripts/device_check.py: the reference solution and two broken submissions (the
#    full S x S matrix; an inverted padding mask) through the GPU stage at S = 4096, 16384
#    and 32768 (the graded size), and prints the table of peak device memory and time;
#    then the `efficient` rows (not graded): the reference flash_attention (out and lse) and
#    sliding_window_attention at the same S, next to a dense S x S baseline
#    (DEVICE_CHECK_PARTS=efficient or =gpu_stage runs only one of the two);
# 3. leaves device_check.md, device_check.json and device_check.log in $OUT;
# 4. runs scripts/device_check_flash_backward.py: the reference flash_attention_backward at S = 4096 and 16384
#    against autograd's dense backward (flash_backward.md and .json in $OUT).
# Needs no internet and no virtual environment: any python3 with torch (pytest optional).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/device_check_out}"
mkdir -p "$OUT"
export OUT
LOG="$OUT/device_check.log"
PY="${PYTHON:-python3}"
LIMIT="${DEVICE_CHECK_SECONDS:-290}"

{
  echo "== machine"
  date -u
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv \
    || echo "nvidia-smi: not found"
  echo "python: $(command -v "$PY" || echo none) $("$PY" --version 2>&1)"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} (the worker pool inherits it)"
  echo "libcuda in the linker cache: $(ldconfig -p 2>/dev/null | grep -c 'libcuda\.so')"
  echo "== torch"
} 2>&1 | tee "$LOG"

TORCH="$("$PY" -c "import torch; print(torch.__version__, torch.cuda.is_available())" 2>&1)"
trc=$?
echo "$TORCH" | tail -3 | tee -a "$LOG"
if [ "$trc" != 0 ]; then
  echo "RESULT: torch cannot be imported by $PY: the GPU stage cannot run here" | tee -a "$LOG"
  exit 3
fi
if [ "${TORCH##* }" != "True" ]; then
  echo "RESULT: torch.cuda.is_available() is False: the GPU stage would report 'not run' here" | tee -a "$LOG"
  exit 4
fi
"$PY" -c "import pytest; print('pytest', pytest.__version__)" 2>&1 | tail -1 | tee -a "$LOG"

echo "== GPU stage (limit ${LIMIT} s)" | tee -a "$LOG"
timeout --signal=TERM --kill-after=10 "$LIMIT" "$PY" -u scripts/device_check.py 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
case "$rc" in
  0) echo "RESULT: every expectation holds (table in $OUT/device_check.md)" ;;
  1) echo "RESULT: an expectation failed (see FAIL lines above and $OUT/device_check.json)" ;;
  124|137) echo "RESULT: stopped after ${LIMIT} s; partial table in $OUT/device_check.md" ;;
  *) echo "RESULT: device_check.py exited with $rc" ;;
esac | tee -a "$LOG"

# 4. the reference flash_attention_backward at S = 4096 and 16384 next to autograd's dense backward (not graded)
echo "== flash_attention_backward (limit ${BACKWARD_LIMIT:-200} s)" | tee -a "$LOG"
timeout --signal=TERM --kill-after=10 "${BACKWARD_LIMIT:-200}" "$PY" -u scripts/device_check_flash_backward.py 2>&1 \
  | tee -a "$LOG"
brc=${PIPESTATUS[0]}
[ "$rc" = 0 ] && rc=$brc
exit "$rc"
