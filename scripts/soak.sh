#!/usr/bin/env bash
# The soak: explores many generated schedules over many run seeds on every in-tree workload's
# reference with every fault on the menu (`--all-faults`), then checks determinism (each
# schedule run twice, traces compared byte for byte) over more seeds, and writes the trust
# figures: schedules, distinct schedules, false alarms (any failure of a reference), harness
# errors, crash-point and fault coverage, determinism (issue 16).
#
#   bash scripts/soak.sh                                  # 10,000 schedules, 10 seeds; 20 × 100 determinism
#   SCHEDULES=600 SEEDS=2 DET_SEEDS=3 DET_SCHEDULES=20 bash scripts/soak.sh   # a quick one
#
# Variables:
#   SCHEDULES      schedules in all, split evenly over the seeds and scenarios (default 10000)
#   SEEDS          run seeds 1..SEEDS (default 10)
#   SCENARIOS      exploration scenarios (default: payout/explore payout/explore-batches
#                  payout/explore-fifo counter/explore orders/explore: the reference of every
#                  in-tree workload, and payout's batch consumer and FIFO queues)
#   DET_SEEDS      determinism: run seeds 101..100+DET_SEEDS, the scenarios taken in turn (default 20)
#   DET_SCHEDULES  determinism: schedules per seed (default 100)
#   JOBS           slots per run (default: crashpoint's, two per core)
#   OUT            where the reports and the summary go (default reports/soak)
#   CRASHPOINT     the command to run (default: `cargo run -q --release -p crashpoint-cli --`)
# Exit code: 0 when there was no false alarm, no harness error and every trace repeated; 1
# otherwise. Each run's reports stay under $OUT; the summary is $OUT/summary.md and .json.
set -euo pipefail
cd "$(dirname "$0")/.."
SCHEDULES=${SCHEDULES:-10000}
SEEDS=${SEEDS:-10}
SCENARIOS=${SCENARIOS:-payout/explore payout/explore-batches payout/explore-fifo counter/explore orders/explore}
DET_SEEDS=${DET_SEEDS:-20}
DET_SCHEDULES=${DET_SCHEDULES:-100}
OUT=${OUT:-reports/soak}
read -r -a scenarios <<<"$SCENARIOS"
if (( SEEDS < 1 || ${#scenarios[@]} < 1 || SCHEDULES < 1 )); then
  echo "soak: SEEDS, SCHEDULES and SCENARIOS must not be empty or zero" >&2
  exit 2
fi
per=$(( (SCHEDULES + SEEDS * ${#scenarios[@]} - 1) / (SEEDS * ${#scenarios[@]}) ))

if [[ -n "${CRASHPOINT:-}" ]]; then
  read -r -a cp <<<"$CRASHPOINT"
else
  cargo build -q --release -p crashpoint-cli
  cp=("$PWD/target/release/crashpoint")
fi

rm -rf "$OUT"
mkdir -p "$OUT/explore" "$OUT/determinism"
# One set of services for every run, stopped whatever happens (`down` after a failed `up` only
# says there is nothing to stop).
trap '"${cp[@]}" down >/dev/null 2>&1 || true' EXIT
"${cp[@]}" up >"$OUT/services.env"
# shellcheck disable=SC1091
source "$OUT/services.env"

# Runs crashpoint with its output in $1.log and its exit code in $1.exit (read by the summary:
# a non-zero exit with a passing report is a harness error too).
run() {
  local at=$1
  shift
  local code=0
  "${cp[@]}" run "$@" --report-dir "$at" >"$at.log" 2>&1 || code=$?
  echo "$code" >"$at.exit"
  return 0
}

started=$(date +%s)
echo "soak: $SEEDS seeds × ${#scenarios[@]} scenarios × $per schedules, every fault on the menu"
for seed in $(seq 1 "$SEEDS"); do
  calibrate=(--no-calibrate)
  [[ $seed == 1 ]] && calibrate=()
  run "$OUT/explore/seed-$seed" "${scenarios[@]}" --all-faults --seed "$seed" --budget "$per" \
    ${JOBS:+--jobs "$JOBS"} "${calibrate[@]}"
  echo "soak: seed $seed: exit $(cat "$OUT/explore/seed-$seed.exit"), $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/explore/seed-$seed.log" || echo 'no verdict')"
done
explore_s=$(( $(date +%s) - started ))

started=$(date +%s)
echo "soak: determinism, $DET_SEEDS seeds × $DET_SCHEDULES schedules, each run twice"
for i in $(seq 1 "$DET_SEEDS"); do
  seed=$((100 + i))
  scenario=${scenarios[$(( (i - 1) % ${#scenarios[@]} ))]}
  run "$OUT/determinism/seed-$seed" "$scenario" --all-faults --check-determinism --seed "$seed" \
    --budget "$DET_SCHEDULES" ${JOBS:+--jobs "$JOBS"} --no-calibrate
  echo "soak: determinism seed $seed ($scenario): exit $(cat "$OUT/determinism/seed-$seed.exit")"
done
determinism_s=$(( $(date +%s) - started ))

python3 scripts/soak-summary.py "$OUT" --explore-seconds "$explore_s" --determinism-seconds "$determinism_s"
