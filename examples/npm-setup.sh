#!/usr/bin/env bash
# The setup step of the Node.js examples (node-invoices, node-payments): `bash npm-setup.sh DIR`
# installs the npm packages of the example in DIR with `npm ci` (exactly its package-lock.json),
# once: a stamp in DIR/node_modules holds the sha256 of package-lock.json, and a second run with
# the same lockfile returns at once. A lock (DIR/.setup.lock) serialises two runs that start
# together (`npm ci` removes node_modules first, under any worker still loading from it). Exits
# non-zero naming the example and what is missing. Each example's setup.sh runs this on itself.
set -euo pipefail
[[ $# -eq 1 && -d "$1" ]] || { echo "npm-setup.sh: expected one argument, the example's directory (examples/node-invoices)" >&2; exit 2; }
cd "$1"
name="$(basename "$(pwd -P)")"
die() { echo "$name setup: $*" >&2; exit 1; }
[[ -f package-lock.json ]] || die "no package-lock.json in $(pwd -P)"
command -v node >/dev/null || die "node not found (Debian: apt-get install nodejs npm; Node.js >= 20)"
command -v npm >/dev/null || die "npm not found (Debian: apt-get install npm)"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' \
    || die "Node.js $(node --version) is too old: sqs-consumer 14, @aws-sdk/client-sqs and stripe 23 need >= 20"
stamp=node_modules/.crashpoint-lock.sha256
sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
[[ -f "$stamp" && "$(cat "$stamp")" == "$sum" ]] && exit 0
exec 9>.setup.lock
flock 9
[[ -f "$stamp" && "$(cat "$stamp")" == "$sum" ]] && exit 0
npm ci --no-audit --no-fund --loglevel=error || die "npm ci failed (is the npm registry reachable? see npm's message above)"
echo "$sum" >"$stamp"
