#!/usr/bin/env bash
exec bash "$(dirname "${BASH_SOURCE[0]}")/../npm-setup.sh" "$(dirname "${BASH_SOURCE[0]}")"
