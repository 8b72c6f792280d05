#!/usr/bin/env bash
# Debian packages some tests drive for real: headless Chromium (the HTML report) and
# Prometheus (the metrics exporter). Installs only what is missing; silent otherwise.
set -euo pipefail
declare -A needed=([chromium]=chromium [prometheus]=prometheus)
missing=()
for cmd in "${!needed[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${needed[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-test-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${missing[@]}" >/dev/null
