#!/usr/bin/env python3
"""Checks of liblfm that run programs (registered with ctest by tests/capi/CMakeLists.txt).

  capi_checks.py greedy GREEDY_EXE FIXTURE     greedy's tokens are reference.json's greedy.runs[0]
                                               (also with --draft ngram and --draft FIXTURE)
  capi_checks.py exports LIBLFM_SO             `nm -D --defined-only` lists only lfm_* symbols
  capi_checks.py install BUILD_DIR SOURCE_DIR FIXTURE
      `cmake --install` into a temporary prefix; the examples configured there with
      find_package(lfm) and built, greedy.c also with pkg-config; all of them run on the fixture.
"""
import json
import os
import subprocess
import sys
import tempfile


def reference_tokens(fixture):
    with open(os.path.join(fixture, "reference.json")) as f:
        run = json.load(f)["greedy"]["runs"][0]
    return run["prompt"], run["new_tokens"]


def check_greedy(exe, fixture):
    """The reference's tokens, also with speculative decoding (prompt lookup, and the fixture
    drafting for itself)."""
    prompt, expected = reference_tokens(fixture)
    for draft in ([], ["--draft", "ngram"], ["--draft", fixture]):
        out = subprocess.run([exe] + draft + [fixture, str(len(expected))] + [str(i) for i in prompt],
                             check=True, capture_output=True, text=True).stdout
        got = [int(t) for t in out.split()]
        if got != expected:
            print(f"greedy {' '.join(draft)}: got {got}\n     expected {expected}")
            return 1
        print(f"greedy {' '.join(draft)}: {len(got)} tokens match the reference")
    return 0


def check_exports(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    bad = [n for n in names if not n.startswith("lfm_")]
    if bad or not names:
        print(f"exports: {len(bad)} symbols outside the API, e.g. {bad[:10]}" if bad else "exports: none at all")
        return 1
    print(f"exports: {len(names)} symbols, all lfm_*")
    return 0


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def check_install(build, source, fixture):
    with tempfile.TemporaryDirectory(prefix="lfm_install_") as tmp:
        prefix = os.path.join(tmp, "prefix")
        run(["cmake", "--install", build, "--prefix", prefix], stdout=subprocess.DEVNULL)
        for f in ("include/lfm/lfm.h", "lib/liblfm.a", "lib/cmake/lfm/lfmConfig.cmake", "lib/pkgconfig/lfm.pc"):
            assert os.path.exists(os.path.join(prefix, f)), f"not installed: {f}"
        libdir = os.path.join(prefix, "lib")
        assert os.path.islink(os.path.join(libdir, "liblfm.so")) and os.path.exists(os.path.join(libdir, "liblfm.so.0"))
        ex = os.path.join(tmp, "examples")
        run(["cmake", "-S", os.path.join(source, "examples"), "-B", ex, "-DCMAKE_BUILD_TYPE=Release",
             f"-DCMAKE_PREFIX_PATH={prefix}"], stdout=subprocess.DEVNULL)
        run(["cmake", "--build", ex, "-j2"], stdout=subprocess.DEVNULL)
        rc = check_greedy(os.path.join(ex, "greedy"), fixture)
        run([os.path.join(ex, "threads"), fixture])
        # pkg-config, as a Makefile would use it (the shared library, found by rpath here).
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "lfm"], check=True, capture_output=True, text=True,
                               env=env).stdout.split()
        exe = os.path.join(tmp, "greedy_pc")
        run(["cc", "-std=c99", "-Wall", "-Werror", os.path.join(source, "examples/c/greedy.c"), "-o", exe] + flags +
            [f"-Wl,-rpath,{libdir}"])
        return rc or check_greedy(exe, fixture)


def main(argv):
    if len(argv) == 4 and argv[1] == "greedy":
        return check_greedy(argv[2], argv[3])
    if len(argv) == 3 and argv[1] == "exports":
        return check_exports(argv[2])
    if len(argv) == 5 and argv[1] == "install":
        return check_install(argv[2], argv[3], argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
