#!/usr/bin/env bash
# Installs the worker's npm packages with `npm ci` (exactly package-lock.json), once: a stamp in
# node_modules holds the sha256 of package-lock.json, and a second run with the same lockfile
# returns at once. A lock serialises two runs that start together (`npm ci` removes
# node_modules first, under any worker still loading from it). Exits non-zero naming what is
# missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
die() { echo "node-invoices setup: $*" >&2; exit 1; }
command -v node >/dev/null || die "node not found (Debian: apt-get install nodejs npm; Node.js >= 20)"
command -v npm >/dev/null || die "npm not found (Debian: apt-get install npm)"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' \
    || die "Node.js $(node --version) is too old: sqs-consumer 14 and @aws-sdk/client-sqs need >= 20"
stamp=node_modules/.crashpoint-lock.sha256
sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
[[ -f "$stamp" && "$(cat "$stamp")" == "$sum" ]] && exit 0
exec 9>.setup.lock
flock 9
[[ -f "$stamp" && "$(cat "$stamp")" == "$sum" ]] && exit 0
npm ci --no-audit --no-fund --loglevel=error || die "npm ci failed (is the npm registry reachable? see npm's message above)"
echo "$sum" >"$stamp"
