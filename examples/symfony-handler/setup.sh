#!/usr/bin/env bash
# Installs the Debian packages of the Symfony Messenger demo worker (the payout article's own stack):
#
#   examples/symfony-handler/setup.sh
#
# Idempotent and instant when everything is there (one dpkg-query); otherwise one
# `apt-get install` (non-interactive, via sudo when not root) of the missing packages, after
# one `apt-get update` if the package lists do not know them. Exits non-zero naming each
# package that is still missing when the install failed.
set -euo pipefail

packages=(
    php-cli                           # PHP 8.2 on bookworm
    php-pgsql                         # pg_connect: the handler's PostgreSQL client
    php-redis                         # phpredis: the dedup middleware's SET NX / DEL
    php-symfony-messenger             # Messenger 5.4: the bus, the worker, the middleware
    php-symfony-amazon-sqs-messenger  # its AmazonSqs transport
    php-async-aws-sqs                 # the SQS client that transport uses (query protocol)
    php-symfony-http-client           # the HTTP client async-aws sends through (long timeout)
    php-symfony-event-dispatcher      # the Worker's events: failure transport, retry, SIGTERM
)

die() {
    echo "symfony-handler setup: $*" >&2
    exit 1
}

missing() {
    local p status
    for p in "${packages[@]}"; do
        status="$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
        [[ "$status" == installed ]] || echo "$p"
    done
}

mapfile -t need < <(missing)
((${#need[@]} == 0)) && exit 0

command -v apt-get >/dev/null || die "apt-get not found; install by hand: ${need[*]}"
sudo=()
if ((EUID != 0)); then
    command -v sudo >/dev/null || die "not root and no sudo; install by hand: ${need[*]}"
    sudo=(sudo -n)
fi

# One install at a time (two crashpoint runs may start together); dpkg has its own lock, but
# the second run should wait and then find everything installed rather than fail on it.
if command -v flock >/dev/null; then
    exec 9>"${TMPDIR:-/tmp}/crashpoint-symfony-setup.lock"
    flock 9
    mapfile -t need < <(missing)
    ((${#need[@]} == 0)) && exit 0
fi

export DEBIAN_FRONTEND=noninteractive
echo "symfony-handler setup: installing ${need[*]}" >&2
if ! apt-cache show "${need[@]}" >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -qq || die "apt-get update failed"
fi
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >&2 || true

mapfile -t still < <(missing)
((${#still[@]} == 0)) || die "could not install: ${still[*]} (see apt-get's message above)"
command -v php >/dev/null || die "php not on PATH after installing php-cli"
