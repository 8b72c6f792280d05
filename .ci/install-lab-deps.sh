#!/usr/bin/env bash
# Install what `ddiag lab` needs (Slurm, munge, iproute2) -- only if something is missing,
# so a second run is silent and takes milliseconds.  Needs root (apt-get).
set -euo pipefail

# command -> Debian package that provides it
declare -A needed=(
    [slurmctld]=slurm-wlm [slurmd]=slurm-wlm [srun]=slurm-wlm [sinfo]=slurm-wlm
    [munged]=munge [ip]=iproute2 [tc]=iproute2
    [nsenter]=util-linux [unshare]=util-linux [runuser]=util-linux [iptables]=iptables
)
missing=()
for cmd in "${!needed[@]}"; do
    if ! PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1; then
        missing+=("${needed[$cmd]}")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" -ne 0 ]; then
    echo "install-lab-deps: missing packages: $pkgs; run this script as root (apt-get needs it)" >&2
    exit 1
fi
echo "install-lab-deps: installing $pkgs" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
# shellcheck disable=SC2086  # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
