#!/usr/bin/env bash
# Install the Debian packages herder needs, when run as root and they are missing.
set -euo pipefail
PKGS=(python3-venv)
[ "$(id -u)" = 0 ] || exit 0
command -v dpkg-query >/dev/null || exit 0
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3 -m venv works already on this image (pyenv); only install when it does not.
if [ ${#missing[@]} -gt 0 ] && ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
