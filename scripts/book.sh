#!/usr/bin/env bash
# Builds the book in docs/ with mdBook (docs/book.toml; output in docs/book/, not committed),
# installing mdbook with cargo when it is missing. Broken relative links and anchors fail the
# `docs` test (harness/cli/tests/docs.rs); mdbook fails on a SUMMARY.md entry without its page.
set -euo pipefail
cd "$(dirname "$0")/.."
MDBOOK_VERSION=0.5.4
if ! command -v mdbook >/dev/null 2>&1; then
  echo "scripts/book.sh: installing mdbook $MDBOOK_VERSION with cargo (once)"
  cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION"
fi
mdbook build docs
