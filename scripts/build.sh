#!/usr/bin/env bash
# Configures and builds lfm. Usage: scripts/build.sh [release|asan] [TARGET...]  (default: release, everything)
#   release → build/        asan → build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer)
# LFM_BENCH=OFF leaves out the micro-benchmarks (the test command does); LFM_FAIL_ON_WARNINGS=1
# fails the build when the compilers printed any warning (the test command does: ccache replays a
# cached compile's warnings, so a clean clone's build sees every one, and the flags stay those of
# the quick start's build, so both share one cache); LFM_WERROR=ON adds -Werror instead. The CUDA backend is built
# where nvcc is found (release only: the sanitizer build is the CPU engine's).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
shift || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release -DLFM_NATIVE=OFF "-DLFM_BUILD_BENCH=${LFM_BENCH:-ON}") ;;
  # -O1 without debug info: quick to compile, still fast enough to run the suite.
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1" -DLFM_SANITIZE=ON -DLFM_BUILD_BENCH=OFF -DLFM_NATIVE=OFF -DLFM_CUDA=OFF) ;;
  *) echo "usage: scripts/build.sh [release|asan]" >&2; exit 2 ;;
esac
flags+=("-DLFM_WERROR=${LFM_WERROR:-OFF}")
bash scripts/setup.sh
# ccache (installed by setup.sh) makes rebuilds of unchanged files instant, in any clone: paths
# are hashed relative to the clone's root.
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
if [ "${LFM_FAIL_ON_WARNINGS:-0}" = 1 ]; then
  log="$dir/build-output.log"
  set +e; cmake --build "$dir" -j"$(nproc)" "${targets[@]}" 2>&1 | tee "$log"; status=${PIPESTATUS[0]}; set -e
  [ "$status" -eq 0 ] || exit "$status"
  if grep -qiE '(^|[: ])warning( #[0-9]+-D)?:' "$log"; then
    echo "build: the compilers printed $(grep -ciE '(^|[: ])warning( #[0-9]+-D)?:' "$log") warning(s) (a clean build prints none; see $log)" >&2
    exit 1
  fi
else
  cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
fi
