#!/usr/bin/env bash
# Runs every test: the release build (with the CUDA backend where nvcc is found; its GPU tests
# skip without a GPU), then the whole suite again under ASan + UBSan (CPU engine; there ctest runs
# each suite or parameterised test as one process, cmake/GTestGroups.cmake, as a sanitized process
# is slow to start). Installs missing Debian/npm packages first (scripts/setup.sh). No
# micro-benchmarks are built here.
set -euo pipefail
cd "$(dirname "$0")/.."
for kind in release asan; do
  dir=build; [ "$kind" = asan ] && dir=build-asan
  echo "== $kind build (at ${SECONDS}s)" >&2
  # A clean build prints no compiler warnings (LFM_FAIL_ON_WARNINGS=0 to build past a new compiler's).
  LFM_BENCH=OFF LFM_FAIL_ON_WARNINGS="${LFM_FAIL_ON_WARNINGS:-1}" bash scripts/build.sh "$kind"
  echo "== $kind tests (at ${SECONDS}s)" >&2
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
done
# Fuzz smoke (issue 12, scripts/fuzz.sh): every libFuzzer harness (clang, ASan + UBSan) for
# LFM_FUZZ_SECONDS each, two at a time, seeded from the test data and fuzz/regressions; a crash,
# timeout or memory blow-up fails the run. LFM_FUZZ_SECONDS=0 skips it; the long campaign is
# `scripts/fuzz.sh all 3600`.
fuzz_seconds=${LFM_FUZZ_SECONDS:-10}
if [ "$fuzz_seconds" -gt 0 ]; then
  echo "== fuzz smoke (${fuzz_seconds}s per target, at ${SECONDS}s)" >&2
  bash scripts/fuzz.sh all "$fuzz_seconds"
fi
echo "== done in ${SECONDS}s" >&2
