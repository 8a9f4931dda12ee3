#!/usr/bin/env bash
# Creates the Python venv of the demo worker and installs requirements.txt into it.
#
#   examples/python-worker/setup.sh [VENV]
#
# VENV defaults to target/python-venv in the repo root; a relative VENV is taken from the
# current directory.
#
# Idempotent: a stamp file in the venv holds the sha256 of requirements.txt, and a second run
# with the same requirements returns at once. Exits non-zero, naming what is missing, when
# the venv cannot be made.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${1:-$root/target/python-venv}"
req="$here/requirements.txt"
stamp="$venv/.crashpoint-requirements.sha256"

die() {
    echo "python-worker setup: $*" >&2
    exit 1
}

command -v sha256sum >/dev/null || die "sha256sum not found (Debian: apt-get install coreutils)"
sum="$(sha256sum "$req" | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$sum" ]]; then
    exit 0
fi

command -v python3 >/dev/null || die "python3 not found (Debian: apt-get install python3 python3-venv)"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$(python3 --version 2>&1) is too old: psycopg 3.3 needs Python >= 3.10"
python3 -c 'import venv, ensurepip' 2>/dev/null \
    || die "python3 has no venv/ensurepip module (Debian: apt-get install python3-venv)"

mkdir -p "$(dirname "$venv")"
# One setup at a time per venv (two crashpoint runs may start together).
if command -v flock >/dev/null; then
    exec 9>"$venv.lock"
    flock 9
    # Another run may have finished the venv while this one waited.
    if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$sum" ]]; then
        exit 0
    fi
fi

rm -f "$stamp"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c '' 2>/dev/null; then
    python3 -m venv --clear "$venv" || die "python3 -m venv $venv failed (Debian: apt-get install python3-venv)"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" \
    || die "pip install -r $req failed (is PyPI reachable? see pip's message above)"
echo "$sum" >"$stamp"
