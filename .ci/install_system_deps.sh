#!/usr/bin/env bash
# System packages the test suite needs beyond the Python venv: Debian's chromium for the UI test
# (nemotron_assets_tests/test_ui.py drives /usr/bin/chromium with Playwright; Playwright's own browser
# download needs internet). Idempotent: does nothing when chromium is already installed.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo -n"
fi

echo "installing chromium (apt) for the UI test ..." >&2
$SUDO apt-get update -qq >/dev/null
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
