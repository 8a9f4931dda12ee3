#!/usr/bin/env bash
# Creates the pg-jobs demo worker's venv, examples/pg-jobs/.venv, and installs requirements.txt
# into it:
#
#   examples/pg-jobs/setup.sh
#
# Idempotent: a stamp file in the venv holds the sha256 of requirements.txt, and a run with the
# same requirements returns at once. flock keeps two runs (two crashpoint runs starting
# together) from building the venv at the same time. Exits non-zero, naming what is missing,
# when the venv cannot be made.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
req="$here/requirements.txt"
stamp="$venv/.requirements.sha256"

die() {
    echo "pg-jobs setup: $*" >&2
    exit 1
}

up_to_date() {
    [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$sum" ]]
}

[[ -f "$req" ]] || die "$req not found"
command -v sha256sum >/dev/null || die "sha256sum not found (Debian: apt-get install coreutils)"
sum="$(sha256sum "$req" | cut -d' ' -f1)"
up_to_date && exit 0

command -v flock >/dev/null || die "flock not found (Debian: apt-get install util-linux)"
command -v python3 >/dev/null || die "python3 not found (Debian: apt-get install python3 python3-venv)"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$(python3 --version 2>&1) is too old: psycopg 3.3 needs Python >= 3.10"
python3 -c 'import venv, ensurepip' 2>/dev/null \
    || die "python3 has no venv/ensurepip module (Debian: apt-get install python3-venv)"

# One setup at a time. The lock file sits beside the venv, not in it: `venv --clear` empties it.
exec 9>"$venv.lock"
flock 9
# Another run may have finished the venv while this one waited.
up_to_date && exit 0

rm -f "$stamp"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c '' 2>/dev/null; then
    python3 -m venv --clear "$venv" \
        || die "python3 -m venv $venv failed (Debian: apt-get install python3-venv)"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" \
    || die "pip install -r $req failed (is PyPI reachable? see pip's message above)"
"$venv/bin/python" -c 'import psycopg' \
    || die "psycopg does not import in $venv (see the message above)"
echo "$sum" >"$stamp"
