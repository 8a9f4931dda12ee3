#!/usr/bin/env bash
# The cost of a declared (team's own process) exploration against an in-process one, measured
# on the same machine in alternating pairs: CPU per schedule of every process a schedule uses
# (crashpoint itself, the team's worker processes, LocalStack, PostgreSQL and Redis), from
# `crashpoint bench`'s reports/bench.json. Services are started once (`crashpoint up`) and
# their start-up is not counted: only what the schedules cost.
#
#   bash scripts/bench-declared.sh                 # 5 pairs, release build
#   PAIRS=3 PROFILE=dev bash scripts/bench-declared.sh
#
# Variables: PAIRS (default 5), PROFILE (release or dev, default release), INVOICES (schedules
# of invoices/explore per run, default 40), JOBS_SCHEDULES (jobs/explore, default 40), PAYOUT
# (payout/explore, default 200), OUT (default data/perf/bench-declared.jsonl: one JSON line
# per run appended).
# Prints each run, then the medians and the ratio of the medians (declared / in-process).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
pairs="${PAIRS:-5}"
profile="${PROFILE:-release}"
out="${OUT:-data/perf/bench-declared.jsonl}"
mkdir -p "$(dirname "$out")"
case "$profile" in
  release) cargo build -q --release -p crashpoint-cli; bin="$root/target/release/crashpoint" ;;
  dev) cargo build -q -p crashpoint-cli; bin="$root/target/debug/crashpoint" ;;
  *) echo "PROFILE must be release or dev" >&2; exit 2 ;;
esac
state="$(mktemp -d)"
export CRASHPOINT_STATE_FILE="$state/up.json"
trap '"$bin" down >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
unset DATABASE_URL SQS_ENDPOINT_URL REDIS_URL CRASHPOINT_SQS_SHARDS
eval "$("$bin" up)"
bench() { # dir scenario schedules
  local json="$state/bench.json"
  (cd "$1" && "$bin" bench --scenario "$2" --schedules "$3" --out "$json" >/dev/null)
  python3 - "$json" "$2" "$profile" "$(date -u +%FT%TZ)" "$(git rev-parse --short HEAD)" >>"$out" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
c, t = b["cpu_per_schedule"], b.get("team") or {}
team = t.get("start_cpu_ms", 0) + t.get("run_cpu_ms", 0)
total = c["harness_ms"] + (c["localstack_ms"] or 0) + (c["postgres_ms"] or 0) + (c["redis_ms"] or 0) + team
print(json.dumps({"at": sys.argv[4], "commit": sys.argv[5], "profile": sys.argv[3], "scenario": sys.argv[2],
                  "schedules": b["schedules"], "schedules_per_s": round(b["schedules_per_s"], 3),
                  "cpu_ms_per_schedule": round(total, 1), "harness_ms": round(c["harness_ms"], 1),
                  "localstack_ms": c["localstack_ms"], "postgres_ms": c["postgres_ms"], "redis_ms": c["redis_ms"],
                  "team": t or None, "quiet_cpu_ms": round(b.get("quiet_cpu_ms", 0), 1), "ceiling": b["ceiling"]}))
PY
  tail -1 "$out"
}
first=$(( $( [ -f "$out" ] && wc -l <"$out" || echo 0 ) + 1 ))
for i in $(seq "$pairs"); do
  echo "== pair $i of $pairs"
  bench "$root/examples/node-invoices" invoices/explore "${INVOICES:-40}"
  bench "$root" payout/explore "${PAYOUT:-200}"
  bench "$root/examples/pg-jobs" jobs/explore "${JOBS_SCHEDULES:-40}"
done
tail -n +"$first" "$out" | python3 -c '
import json, statistics, sys
runs = [json.loads(l) for l in sys.stdin]
med = {}
for s in ("invoices/explore", "payout/explore", "jobs/explore"):
    xs = [r["cpu_ms_per_schedule"] for r in runs if r["scenario"] == s]
    med[s] = statistics.median(xs)
    print(f"{s:18} median CPU per schedule {med[s]:7.1f} ms over {len(xs)} runs: {xs}")
base = med["payout/explore"]
for s in ("invoices/explore", "jobs/explore"):
    print(f"{s} / payout/explore: {med[s] / base:.2f}x")
'
