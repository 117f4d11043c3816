#!/usr/bin/env bash
# Installs what ZeroRT needs on Debian 12, and nothing when everything is present:
#  1. Debian packages (compiler, CMake, Open MPI, LibTorch 1.13 for the system build, ...);
#  2. the project's Python venv (scripts/requirements*.txt): torch 2.x (the main build's
#     LibTorch), deepspeed, transformers, accelerate, safetensors, tensorboard, numpy; and peft,
#     added in place (scripts/requirements-added.txt).
# The venv lives outside the clone (scripts/venv.sh) and .venv in the clone links to it.
# Runs as root, or through sudo when not root. Prints what it installs.
# ZRT_SKIP_VENV=1 installs the Debian packages only.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

PACKAGES=(
  g++ cmake ninja-build ccache git
  libtorch-dev
  libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libcxxopts-dev
  googletest libgtest-dev
  python3 python3-venv python3-dev
  iproute2 iputils-ping iptables libnetfilter-queue-dev bc
  clang libclang-rt-14-dev
  # zrt-generate's text prompts; spm_train/spm_encode/spm_decode for its test and the README
  libsentencepiece-dev sentencepiece
  # aio/ (NVMe offload): the io_uring and libaio backends; without them only pread/pwrite
  liburing-dev libaio-dev
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#PACKAGES[@]} Debian packages present"
else
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
fi

[[ "${ZRT_SKIP_VENV:-0}" == 1 ]] && exit 0

# shellcheck source=venv.sh
source "$ROOT/scripts/venv.sh"
if [[ -f "$ZRT_VENV/.zrt-complete" ]]; then
  echo "install_deps: venv present ($ZRT_VENV)"
else
  echo "install_deps: creating the venv $ZRT_VENV (torch, deepspeed, transformers, ...;" \
       "about 4 GB of downloads the first time)"
  # A venv without the marker is a failed earlier attempt: start again (pip's cache, in
  # ~/.cache/pip outside the clone, keeps what was downloaded).
  rm -rf "$ZRT_VENV"
  mkdir -p "$(dirname "$ZRT_VENV")"
  "$ZRT_VENV_PYTHON_BASE" -m venv "$ZRT_VENV"
  pip=("$ZRT_VENV_PYTHON" -m pip --disable-pip-version-check)
  "${pip[@]}" install -q --upgrade pip setuptools wheel
  "${pip[@]}" install --progress-bar off -r "$ROOT/scripts/requirements.txt"
  # DeepSpeed's sdist imports torch while it builds: build it against this venv's torch, with no
  # ops prebuilt (its CPU ops are compiled on first use with the venv's ninja).
  DS_BUILD_OPS=0 "${pip[@]}" install --progress-bar off --no-build-isolation \
    -r "$ROOT/scripts/requirements-deepspeed.txt"
  touch "$ZRT_VENV/.zrt-complete"
  echo "install_deps: venv ready: $("$ZRT_VENV_PYTHON" -c 'import torch, deepspeed, transformers; print("torch", torch.__version__, "deepspeed", deepspeed.__version__, "transformers", transformers.__version__)')"
fi
# The packages added in place (scripts/requirements-added.txt), whenever that file changed.
added_key="$(sha256sum < "$ROOT/scripts/requirements-added.txt" | cut -c1-12)"
if [[ "$(cat "$ZRT_VENV/.zrt-added" 2>/dev/null)" != "$added_key" ]]; then
  "$ZRT_VENV_PYTHON" -m pip --disable-pip-version-check install --progress-bar off \
    -r "$ROOT/scripts/requirements-added.txt"
  echo "$added_key" > "$ZRT_VENV/.zrt-added"
fi
ln -sfn "$ZRT_VENV" "$ROOT/.venv"
