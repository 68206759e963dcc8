#!/usr/bin/env bash
# System packages the test suite needs beyond the Python venv:
# - Debian's chromium for the UI test (nemotron_assets_tests/end_to_end/test_ui.py drives /usr/bin/chromium with
#   Playwright; Playwright's own browser download needs internet);
# - Debian's PostgreSQL server for the cluster test (nemotron_assets_tests/end_to_end/test_cluster_deployment.py runs
#   initdb and pg_ctl from /usr/lib/postgresql/<version>/bin in a temp folder; the package's own cluster service is
#   not used).
# Idempotent: installs only what is missing, and runs apt-get update at most once.
set -euo pipefail

missing=()
if [ ! -x /usr/bin/chromium ]; then
    missing+=(chromium)
fi
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; then
    missing+=(postgresql)
fi
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo -n"
fi

echo "installing ${missing[*]} (apt) for the UI and cluster tests ..." >&2
$SUDO apt-get update -qq >/dev/null
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
