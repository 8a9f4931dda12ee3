#!/usr/bin/env bash
# Installs what crashpoint's native provider needs, only where it is missing (Debian/Ubuntu):
# PostgreSQL server binaries, redis-server, python3 with venv (LocalStack is installed by
# crashpoint itself into a venv under ~/.cache/crashpoint on first use), Node.js and npm for the
# Node.js demo worker (examples/node-invoices), and chromium for the
# timeline screenshots (`crashpoint screenshot`, and a test that renders a timeline). The gate
# does not take screenshots: CRASHPOINT_NO_CHROMIUM=1 skips Chromium.
set -euo pipefail
need=()
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ -z "${CRASHPOINT_NO_CHROMIUM:-}" ] && [ -z "${CHROMIUM:-}" ] \
  && ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
  && ! command -v google-chrome >/dev/null 2>&1; then
  need+=(chromium)
fi
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "scripts/setup.sh: installing ${need[*]}"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
else
  echo "scripts/setup.sh: postgresql, redis-server, python3-venv, node and npm (and chromium unless skipped) are present"
fi
