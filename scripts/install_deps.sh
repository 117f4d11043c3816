#!/usr/bin/env bash
# Installs what ZeroRT needs on Debian 12, and nothing when everything is present.
# Runs as root, or through sudo when not root. Prints each package it installs.
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build ccache git
  libtorch-dev python3-torch
  libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libcxxopts-dev
  googletest libgtest-dev
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "install_deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install_deps: done"
