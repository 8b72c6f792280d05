#!/usr/bin/env bash
# Headless Chromium for the HTML report test (Debian's package). A no-op when present.
set -euo pipefail
command -v chromium >/dev/null && exit 0
echo "install-browser: installing chromium" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
