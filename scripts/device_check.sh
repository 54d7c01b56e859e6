#!/usr/bin/env bash
# One-shot device check (issues 17, 52): the device test tier (eager, then on the graphed engine), the graphed
# engine's payoff (benchmarks/graphed_payoff.py), the per-step benchmark, one decode step split
# (benchmarks/gpu_step_split.py), a summary. Steps run in that order, most important first, under one deadline.
#
#   scripts/device_check.sh             # a GPU machine: CUDA tier (eager, then PACER_GRAPHED=1) + the benchmarks at
#                                       # the real shapes of the GPU default pair (Qwen2.5-7B/0.5B on an H200), bf16
#   scripts/device_check.sh --dry-run   # any machine: the same steps on the CPU with tiny shapes; ~1-2 min
#
# Its own estimate on an H200 (from the runs of 2026-12-04): tier ~30 s, graphed tier ~40 s (captures included),
# payoff ~150 s (two pairs of random 7B/0.5B models built, 9 rows x 3 runs, the peer), per-step benchmark ~100 s,
# step split ~60 s: ~6.5 min; every step's limit is cut to what is left of DEADLINE_S (default 470 s, < 8 min).
#
# Environment: PYTHON (default: .venv/bin/python when present, else python3); DEVICE_CHECK_OUT (where the
# benchmarks write their JSON and summary.txt, and this script tier.log and tier-graphed.log; default
# benchmarks/results/device_check, or a temporary folder for the dry run); DEADLINE_S.
# Exit status: 0 when both tiers passed (or were skipped for want of a GPU) and every benchmark ran; 1 otherwise.
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
  device=cpu; bench_args=(--dry-run); split_args=(--dry-run --steps 5); payoff_args=(--dry)
  out="${DEVICE_CHECK_OUT:-${TMPDIR:-/tmp}/pacer_device_check_dry_run}"
else
  device=cuda; bench_args=(--budget-seconds 100); split_args=(--steps 50); payoff_args=(--budget-seconds 150)
  out="${DEVICE_CHECK_OUT:-benchmarks/results/device_check}"
fi
mkdir -p "$out"
started=$SECONDS
deadline=$((started + ${DEADLINE_S:-470}))

# limit N: N seconds, or what is left before the deadline when that is less (0: no time left)
limit() { local left=$((deadline - SECONDS)); (( left < $1 )) && echo $((left > 0 ? left : 0)) || echo "$1"; }

run_step() {   # run_step NAME LIMIT COMMAND...: the command under its limit; its exit status (124: ran out of time)
  local name=$1 seconds; seconds=$(limit "$2"); shift 2
  if (( seconds < 15 )); then echo "== $name: skipped (the ${DEADLINE_S:-470} s deadline is reached)"; return 124; fi
  echo "== $name (limit ${seconds}s)"
  timeout "$seconds" "$@"
}

echo "== device check ($mode run): deadline ${DEADLINE_S:-470} s; on an H200 expect ~6.5 min"
echo "   1 the device tier: greedy fixed SD, PACER and the feature head return AR's tokens on $device"
run_step "1/5 device tier, eager: pytest tests/test_cuda_tier.py --device $device" 90 \
  "$PYTHON" -m pytest tests/test_cuda_tier.py --device "$device" -k "not dry_run" -q -rs -p no:cacheprovider \
  2>&1 | tee "$out/tier.log"
tier_status=${PIPESTATUS[0]}

echo "   2 the same tier with every model call on the graphed engine (static caches; CUDA graphs on a GPU)"
PACER_GRAPHED=1 run_step "2/5 device tier, graphed: PACER_GRAPHED=1 pytest tests/test_cuda_tier.py" 120 \
  "$PYTHON" -m pytest tests/test_cuda_tier.py --device "$device" -k "not dry_run" -q -rs -p no:cacheprovider \
  2>&1 | tee "$out/tier-graphed.log"
graphed_status=${PIPESTATUS[0]}

echo "   3 graphed tokens/s of AR, fixed:2/4/8, PACER (twin pair: acceptance 1), SMC-SD (random pair), the"
echo "     assisted-generation peer; graphed step costs c, v(γ) and the speedup to expect at α = 0.6-0.9"
run_step "3/5 graphed payoff: benchmarks/graphed_payoff.py ${payoff_args[*]}" 200 \
  "$PYTHON" benchmarks/graphed_payoff.py "${payoff_args[@]}" --out "$out/payoff"
payoff_status=$?

echo "   4 eager per-step split into draft / verify / other for AR, fixed, PACER, SMC-SD and the self drafters"
run_step "4/5 per-step benchmark: benchmarks/device_check.py ${bench_args[*]}" 140 \
  "$PYTHON" benchmarks/device_check.py "${bench_args[@]}" --out "$out"
bench_status=$?

echo "   5 one decode step: eager forward, the project's cache, sampling, one CUDA graph (per model of both GPU pairs)"
run_step "5/5 one decode step split: benchmarks/gpu_step_split.py ${split_args[*]}" 90 \
  "$PYTHON" benchmarks/gpu_step_split.py "${split_args[@]}" --out "$out/split"
split_status=$?

echo
echo "== summary ($mode run, $((SECONDS - started)) s)"
echo "device tier, eager: $(tail -n 1 "$out/tier.log" 2>/dev/null) (exit $tier_status)"
echo "device tier, graphed: $(tail -n 1 "$out/tier-graphed.log" 2>/dev/null) (exit $graphed_status)"
if [[ $payoff_status -eq 0 && -f "$out/payoff/summary.txt" ]]; then
  cat "$out/payoff/summary.txt"
else
  echo "graphed payoff: failed (exit $payoff_status; 124 = ran out of time)"
fi
if [[ $bench_status -eq 0 && -f "$out/summary.txt" ]]; then
  cat "$out/summary.txt"
else
  echo "per-step benchmark: failed (exit $bench_status; 124 = ran out of time)"
fi
[[ $split_status -eq 0 ]] || echo "step split: failed (exit $split_status)"
echo "files: $out"
[[ $tier_status -eq 0 && $graphed_status -eq 0 && $payoff_status -eq 0 && $bench_status -eq 0 && $split_status -eq 0 ]]
