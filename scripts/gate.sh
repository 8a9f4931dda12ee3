#!/usr/bin/env bash
# The CI gate: installs what the native services need, runs crashpoint against real
# PostgreSQL, LocalStack SQS and Redis (it starts and stops them itself), and leaves the reports
# in $REPORT_DIR (junit.xml, report.json, summary.md, timeline-*.html) even when it fails.
#
#   bash scripts/gate.sh                          # every scenario, 200 schedules per exploration
#   SHARD=2/4 BUDGET=10m bash scripts/gate.sh     # one job of four, ten minutes of exploration
#   bash scripts/gate.sh --mutant no-dedup        # extra arguments go to `crashpoint run`
#
# Variables: BUDGET (schedules, or a duration such as 90s; default 200), SHARD (I/N, default
# 1/1), SEED (default 0), REPORT_DIR (default reports/latest).
# Exit code: crashpoint's own: 0 all passed, 1 an invariant violated, 2 harness/services error.
set -euo pipefail
cd "$(dirname "$0")/.."
CRASHPOINT_NO_CHROMIUM=1 bash scripts/setup.sh
# The dev profile already builds dependencies optimised (opt-level 2), and shares the build
# with `cargo test`.
cargo build -q -p crashpoint-cli
set +e
cargo run -q -p crashpoint-cli -- run \
  --budget "${BUDGET:-200}" --shard "${SHARD:-1/1}" --seed "${SEED:-0}" \
  --report-dir "${REPORT_DIR:-reports/latest}" "$@"
code=$?
set -e
echo "scripts/gate.sh: exit $code; reports in ${REPORT_DIR:-reports/latest}"
exit "$code"
