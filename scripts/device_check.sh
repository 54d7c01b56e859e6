#!/usr/bin/env bash
# One-shot device check (issue 17): the device test tier, the per-step benchmark, one decode step split (the
# model's eager forward, the project's cache, sampling, a CUDA graph: benchmarks/gpu_step_split.py), a summary.
#
#   scripts/device_check.sh             # a GPU machine: CUDA tier + the benchmark at the real shapes of the pair the
#                                       # app loads on that GPU (models.gpu_default_pair: Qwen2.5-7B/0.5B on an H200), bf16
#   scripts/device_check.sh --dry-run   # any machine: the same three steps on the CPU with tiny shapes; < 1 min
#
# Environment: PYTHON (default: .venv/bin/python when present, else python3); DEVICE_CHECK_OUT (where the
# benchmark writes device_check.json and summary.txt, and this script tier.log; default
# benchmarks/results/device_check, or a temporary folder for the dry run).
# Exit status: 0 when the tier passed (or was skipped for want of a GPU) and both benchmarks ran; 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

mode=gpu
case "${1:-}" in
  --dry-run) mode=dry ;;
  "") ;;
  *) echo "usage: scripts/device_check.sh [--dry-run]" >&2; exit 2 ;;
esac

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

if [[ $mode == dry ]]; then
  device=cpu; bench_args=(--dry-run); tier_limit=150; bench_limit=120; split_args=(--dry-run --steps 5)
  out="${DEVICE_CHECK_OUT:-${TMPDIR:-/tmp}/pacer_device_check_dry_run}"
else
  device=cuda; bench_args=(--budget-seconds 240); tier_limit=150; bench_limit=300; split_args=(--steps 50)
  out="${DEVICE_CHECK_OUT:-benchmarks/results/device_check}"
fi
mkdir -p "$out"
started=$SECONDS

echo "== 1/3 device tier: pytest tests/test_cuda_tier.py --device $device (limit ${tier_limit}s)"
timeout "$tier_limit" "$PYTHON" -m pytest tests/test_cuda_tier.py --device "$device" -k "not dry_run" \
  -q -rs -p no:cacheprovider 2>&1 | tee "$out/tier.log"
tier_status=${PIPESTATUS[0]}

echo "== 2/3 per-step benchmark: benchmarks/device_check.py ${bench_args[*]:-} (limit ${bench_limit}s)"
timeout "$bench_limit" "$PYTHON" benchmarks/device_check.py "${bench_args[@]}" --out "$out"
bench_status=$?

echo "== 3/3 one decode step split: benchmarks/gpu_step_split.py ${split_args[*]} (limit 150s)"
timeout 150 "$PYTHON" benchmarks/gpu_step_split.py "${split_args[@]}" --out "$out/split"
split_status=$?

echo
echo "== summary ($mode run, $((SECONDS - started)) s)"
echo "device tier: $(tail -n 1 "$out/tier.log") (exit $tier_status)"
if [[ $bench_status -eq 0 && -f "$out/summary.txt" ]]; then
  cat "$out/summary.txt"
else
  echo "benchmark: failed (exit $bench_status; 124 = ran past ${bench_limit}s)"
fi
[[ $split_status -eq 0 ]] || echo "step split: failed (exit $split_status)"
echo "files: $out"
[[ $tier_status -eq 0 && $bench_status -eq 0 && $split_status -eq 0 ]]
