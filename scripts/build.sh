#!/usr/bin/env bash
# Configures and builds lfm. Usage: scripts/build.sh [release|asan]  (default: release)
#   release → build/        asan → build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer)
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release -DLFM_NATIVE=OFF) ;;
  # -O1 without debug info: quick to compile, still fast enough to run the suite.
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1" -DLFM_SANITIZE=ON -DLFM_BUILD_BENCH=OFF -DLFM_NATIVE=OFF) ;;
  *) echo "usage: scripts/build.sh [release|asan]" >&2; exit 2 ;;
esac
bash scripts/setup.sh
# ccache, when installed, makes rebuilds of unchanged files instant (optional).
command -v ccache >/dev/null 2>&1 && flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
