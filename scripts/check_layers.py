#!/usr/bin/env python3
"""Checks the layer rule of src/: a folder may include only itself and the folders below it.

Usage: scripts/check_layers.py [SRC_DIR]      (default: the src/ next to this script)
       scripts/check_layers.py --self-test    (proves the check catches a violation)

The rule (also in README.md, "Layout"). Lowest first; each layer lists what it may include:
  core       —                       tensors, dtypes, mmap, threads, errors, UTF-8
  image      core                    image decoding (JPEG, PNG, WebP), resize, LFM2-VL preprocessing
  audio      core                    the LFM2-Audio speech front end (log-mel features)
  formats    core                    safetensors and GGUF files (read/write)
  kernels    core                    the Backend interface and its CPU implementations
  tokenizer  core formats            byte-level BPE (tokenizer.json or GGUF metadata)
  chat       core                    Jinja chat templates, tool-call/reasoning parsing
  grammar    core                    GBNF / JSON Schema / regex grammars, token masks
  cache      core kernels            KV block pools, conv-state slots, prefix cache
  model      core image audio formats kernels cache  LFM2 config, weights, forward step
  engine     core image audio formats kernels cache model tokenizer chat grammar   sampling, scheduling, requests
  convert    core image audio formats kernels model tokenizer   GGUF export, quantization, random checkpoints
  server     everything except cli and hub    the HTTP front end
  hub        core                    Hugging Face Hub references, downloads and cache
  capi       everything except cli and server   the C API (include/lfm/lfm.h), liblfm
  cli        everything               the `lfm` executable
Exit status 0 when every #include "folder/..." respects the rule, 1 otherwise (each offending
line is printed), 2 on usage errors.
"""
import os
import re
import sys
import tempfile

ALLOWED = {
    "core": set(),
    "image": {"core"},
    "audio": {"core"},
    "formats": {"core"},
    "kernels": {"core"},
    "tokenizer": {"core", "formats"},
    "chat": {"core"},
    "grammar": {"core"},
    "cache": {"core", "kernels"},
    "model": {"core", "image", "audio", "formats", "kernels", "cache"},
    "engine": {"core", "image", "audio", "formats", "kernels", "cache", "model", "tokenizer", "chat", "grammar"},
    "convert": {"core", "image", "audio", "formats", "kernels", "model", "tokenizer"},
    "server": {"core", "image", "audio", "formats", "kernels", "cache", "model", "tokenizer", "chat", "grammar", "engine", "convert"},
    "hub": {"core"},
    "capi": {"core", "image", "audio", "formats", "kernels", "cache", "model", "tokenizer", "chat", "grammar", "engine", "convert", "hub"},
    "cli": {"core", "image", "audio", "formats", "kernels", "cache", "model", "tokenizer", "chat", "grammar", "engine", "convert", "server", "hub"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+)/')
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inl")


def declared_rule_is_acyclic():
    state = {}

    def visit(layer):
        if state.get(layer) == 1:
            return False
        if state.get(layer) == 2:
            return True
        state[layer] = 1
        ok = all(visit(dep) for dep in ALLOWED[layer])
        state[layer] = 2
        return ok

    return all(visit(layer) for layer in ALLOWED)


def check(src):
    problems = []
    for layer in sorted(os.listdir(src)):
        path = os.path.join(src, layer)
        if not os.path.isdir(path):
            continue
        if layer not in ALLOWED:
            problems.append(f"{layer}/: folder is not in the layer rule (add it to scripts/check_layers.py)")
            continue
        for root, _, files in os.walk(path):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                file = os.path.join(root, name)
                with open(file, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        if target == layer or target in ALLOWED[layer]:
                            continue
                        rel = os.path.relpath(file, src)
                        problems.append(f"{rel}:{n}: {layer} may not include {target}/ ({line.strip()})")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        for layer in ("core", "model"):
            os.makedirs(os.path.join(tmp, layer))
        with open(os.path.join(tmp, "model", "a.h"), "w") as f:
            f.write('#include "core/x.h"\n')
        assert check(tmp) == [], "a downward include must pass"
        with open(os.path.join(tmp, "core", "b.h"), "w") as f:
            f.write('#include "model/a.h"\n')
        bad = check(tmp)
        assert len(bad) == 1 and "core may not include model/" in bad[0], bad
        os.makedirs(os.path.join(tmp, "misc"))
        assert any("misc/" in p for p in check(tmp)), "an undeclared folder must fail"
    print("check_layers: self-test passed")
    return 0


def main(argv):
    if not declared_rule_is_acyclic():
        print("check_layers: the declared layer rule has a cycle", file=sys.stderr)
        return 1
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    src = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    if not os.path.isdir(src):
        print(f"check_layers: '{src}' is not a folder", file=sys.stderr)
        return 2
    problems = check(src)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) break the layer rule", file=sys.stderr)
        return 1
    print("check_layers: every include respects the layer rule")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
