#!/usr/bin/env python3
"""Checks that the core library is portable x86-64: no AVX (VEX/EVEX) instruction in any object
file except the SIMD kernel translation units, which run only after a CPU check.

Usage: scripts/check_portable.py OBJECT_DIR SOURCE_DIR
       (e.g. build/CMakeFiles/lfmcore.dir .): objects of sources that no longer exist are skipped.
Exit 0 when clean, 1 listing the offending objects and a sample instruction, 2 on usage errors.
"""
import os
import re
import subprocess
import sys

ALLOWED = re.compile(r"kernels/cpu/kernels_(avx2|avx512|amx|bf16_dot)\.cpp\.o$")
# VEX/EVEX-encoded instructions are the ones spelled with a leading 'v' (vmovups, vfmadd...);
# SSE2 (baseline x86-64) has none, and ymm/zmm registers only exist with AVX.
AVX = re.compile(r"\t(v[a-z0-9]+)(\s|$)|%[yz]mm\d+", re.M)


def main(argv):
    if len(argv) != 3 or not os.path.isdir(argv[1]) or not os.path.isdir(argv[2]):
        print(__doc__, file=sys.stderr)
        return 2
    objects = []
    for root, _, files in os.walk(argv[1]):
        for f in files:
            obj = os.path.join(root, f)
            src = os.path.join(argv[2], os.path.relpath(obj, argv[1])[: -len(".o")])
            if f.endswith(".o") and os.path.exists(src):  # stale objects of moved sources are skipped
                objects.append(obj)
    if not objects:
        print(f"check_portable: no object files under {argv[1]}", file=sys.stderr)
        return 2
    bad = []
    for obj in sorted(objects):
        if ALLOWED.search(obj.replace(os.sep, "/")):
            continue
        out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True, text=True).stdout
        m = AVX.search(out)
        if m:
            line = next(l for l in out.splitlines() if AVX.search(l))
            bad.append(f"{os.path.relpath(obj, argv[1])}: {line.strip()}")
    for b in bad:
        print(b)
    if bad:
        print(f"check_portable: {len(bad)} object(s) use AVX outside the SIMD kernels", file=sys.stderr)
        return 1
    print(f"check_portable: {len(objects)} objects, AVX only in the SIMD kernel units")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
