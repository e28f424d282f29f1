#!/usr/bin/env bash
# Packs the CUDA build for scripts/device_check.sh on a GPU machine that lacks this project's Debian
# packages (the lent H200 has nvcc and CMake but not nlohmann-json, CLI11, GoogleTest, httplib):
# lfm, lfm_cuda_tests and lfm_tests (stripped), every shared library they load except cuBLAS and
# the driver (those come from the GPU machine; cuBLAS is opened at run time through the library
# path device_check.sh sets, or from the toolkit's folder), and glibc with its loader in a folder of its own
# (used only where the GPU machine's glibc is older than this one's). Writes .devcarry.tgz (ignored
# by git): name it in the device call's `carry`; device_check.sh unpacks and uses it.
# BASE_LFM=PATH adds another build's lfm (e.g. the previous commit's, built in a worktree) as
# lfm_base, which device_check.sh benches alternately with this one on the same GPU.
#   scripts/device_pack.sh [BUILD_DIR]    (default build/, configured with -DLFM_CUDA=ON)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
grep -q '^LFM_CUDA:BOOL=ON' "$B/CMakeCache.txt" || { echo "device_pack: $B is not a CUDA build" >&2; exit 1; }
cmake --build "$B" -j"$(nproc)" --target lfm lfm_cuda_tests lfm_tests
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
d=$stage/devcarry
mkdir -p "$d/bin" "$d/lib" "$d/lib/glibc"
bins=("$B/lfm" "$B/tests/lfm_cuda_tests" "$B/tests/lfm_tests")
for f in "${bins[@]}"; do cp "$f" "$d/bin/" && strip --strip-debug "$d/bin/$(basename "$f")"; done
if [ -n "${BASE_LFM:-}" ]; then
  cp "$BASE_LFM" "$d/bin/lfm_base" && strip --strip-debug "$d/bin/lfm_base"
  (cd "$(dirname "$BASE_LFM")" && git log -1 --format='%H %s' 2>/dev/null || echo unknown) > "$d/base_commit"
  bins+=("$BASE_LFM")
fi
# glibc's own libraries may only be used together with its loader: keep them apart.
glibc='/(ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+)\.so'
ldd "${bins[@]}" | awk '/=> \//{print $3}' | grep -v -e libcublas -e libcuda | sort -u | while read -r lib; do
  if [[ $lib =~ $glibc ]]; then cp -L "$lib" "$d/lib/glibc/"; else cp -L "$lib" "$d/lib/"; fi
done
cp -L /lib64/ld-linux-x86-64.so.2 "$d/lib/glibc/"
# The tests find tests/data under the path they were built in: device_check.sh links it.
pwd > "$d/source_root"
git log -1 --format='%H%n%s' > "$d/commit"
tar czf .devcarry.tgz -C "$stage" devcarry
echo "device_pack: .devcarry.tgz $(du -h .devcarry.tgz | cut -f1) ($(git ls-files | xargs du -cb 2>/dev/null | tail -1 | cut -f1) bytes of tracked files travel too)"
