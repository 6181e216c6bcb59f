#!/usr/bin/env bash
# Installs every Debian package zinf needs and configures a build. Idempotent, non-interactive.
# Usage: bash scripts/setup.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}

PACKAGES=(
  cmake ninja-build g++ pkg-config
  catch2 libbenchmark-dev
  liburing-dev libsimgrid-dev libboost-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev
  libtcmalloc-minimal4
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  python3-matplotlib python3-numpy python3-yaml python3-regex
  fio fortunes
  qemu-user
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${ZINF_CMAKE_ARGS:-} >/dev/null
