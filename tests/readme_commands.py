#!/usr/bin/env python3
"""Runs every command in README.md's ```sh blocks, as a newcomer would paste them, and fails if
one exits non-zero.

    readme_commands.py --lfm build/lfm [--liblfm build/liblfm.so] [--readme README.md]
    readme_commands.py --self-test        (shows that the check can fail)

Run from the repository root (the README's paths are relative to it). `build/lfm` in a command is
replaced by --lfm. A line is skipped, and listed as skipped, when it holds one of SKIP's markers:
a real model's placeholder path, a Hugging Face Hub reference, or one of the build scripts (this
test runs inside their build). A `lfm serve` line is started in the background on a free
loopback port (which replaces 8080 in the block's other lines), and stopped with SIGTERM at the
end of its block, where it must exit 0.
"""
import argparse
import os
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = [
    ("/path/to/", "a real model's path: the reader's own files"),
    ("LiquidAI/", "a Hugging Face Hub model: needs the network"),
    ("scripts/", "a build script: this test runs inside its build"),
]
COMMAND_TIMEOUT_S = 60
SERVER_START_S = 30


def blocks(text):
    """The ```sh blocks (also indented ones, in list items), each as a list of commands: lines
    joined at a trailing backslash, blank and comment-only lines dropped."""
    out = []
    for m in re.finditer(r"^( *)```(?:sh|bash)\n(.*?)^\1```", text, re.M | re.S):
        indent = len(m.group(1))
        cmds, cur = [], ""
        for line in m.group(2).splitlines():
            line = line[indent:] if line[:indent].strip() == "" else line
            cur += line
            if cur.endswith("\\"):
                cur += "\n"
                continue
            if cur.strip() and not cur.strip().startswith("#"):
                cmds.append(cur)
            cur = ""
        if cur.strip():
            cmds.append(cur)
        out.append(cmds)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cmd, env, log):
    """Starts `cmd` (an `lfm serve` line) and waits for its "listening on" line."""
    # A trailing comment first ("… &   # --api-key KEY"): left in, the `&` would background the
    # server inside bash, which exits at once, and the server would outlive the test.
    cmd = re.sub(r"\s#.*$", "", cmd.rstrip()).rstrip().rstrip("&").rstrip()
    p = subprocess.Popen(["bash", "-c", "exec " + cmd], stdout=subprocess.PIPE, stderr=log, env=env, text=True)
    deadline = time.time() + SERVER_START_S
    while time.time() < deadline:
        ready, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.time()))
        if not ready:
            break
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith("listening on "):
            if p.poll() is not None:  # the process we hold is not the server: it would be left running
                log.write(f"the server line exited ({p.returncode}) while its server listens: not a foreground command\n")
                return None
            return p
    p.kill()
    p.wait()
    return None


def run_readme(readme, lfm, liblfm):
    env = dict(os.environ)
    if liblfm:
        env["LFM_LIBRARY"] = liblfm
    ran, skipped, failed = [], [], []
    log = tempfile.TemporaryFile(mode="w+")
    for cmds in blocks(open(readme, encoding="utf-8").read()):
        port = str(free_port())
        servers = []
        for cmd in cmds:
            reason = next((why for marker, why in SKIP if marker in cmd), None)
            if reason:
                skipped.append((cmd, reason))
                continue
            real = re.sub(r"(^|[\s|;&(])build/lfm(?=\s)", lambda m: m.group(1) + shlex.quote(lfm), cmd)
            real = re.sub(r"\b8080\b", port, real)
            if re.search(r"\blfm\S*\s+serve\b", real):
                log.seek(0)
                log.truncate()
                p = start_server(real, env, log)
                if p is None:
                    log.seek(0)
                    failed.append((cmd, "the server did not start:\n" + log.read()[-2000:]))
                else:
                    servers.append((cmd, p))
                    ran.append(cmd)
                continue
            try:
                r = subprocess.run(["bash", "-o", "pipefail", "-c", real], env=env, capture_output=True, text=True,
                                   timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
                if r.returncode != 0:
                    failed.append((cmd, f"exit status {r.returncode}\n{(r.stdout + r.stderr)[-2000:]}"))
                else:
                    ran.append(cmd)
            except subprocess.TimeoutExpired:
                failed.append((cmd, f"still running after {COMMAND_TIMEOUT_S} s"))
        for cmd, p in servers:
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = "still running 30 s after SIGTERM"
            if rc != 0:
                failed.append((cmd, f"the server's exit status after SIGTERM: {rc}"))
    return ran, skipped, failed


def report(ran, skipped, failed):
    for cmd in ran:
        print("ran:     " + cmd.replace("\n", " "))
    for cmd, why in skipped:
        print(f"skipped: {cmd}  ({why})".replace("\n", " "))
    for cmd, why in failed:
        print(f"FAILED:  {cmd}\n  {why}")


def self_test(lfm):
    with tempfile.TemporaryDirectory() as d:
        readme = os.path.join(d, "README.md")
        with open(readme, "w") as f:
            f.write("x\n```sh\ntrue   # ok\nfalse\nls /path/to/model\n```\n\n  ```sh\n  echo a \\\n    b | grep -q c\n  ```\n")
        ran, skipped, failed = run_readme(readme, lfm, None)
    ok = ([c for c in ran] == ["true   # ok"] and [c for c, _ in skipped] == ["ls /path/to/model"]
          and [c for c, _ in failed] == ["false", "echo a \\\n  b | grep -q c"])
    report(ran, skipped, failed)
    print("self-test " + ("passed" if ok else "FAILED: the checker missed a failing or skipped line"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lfm", default="build/lfm")
    ap.add_argument("--liblfm", default=None)
    ap.add_argument("--readme", default="README.md")
    ap.add_argument("--min-commands", type=int, default=5, help="fewer runnable commands than this is a failure")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test(os.path.abspath(a.lfm))
    t0 = time.time()
    ran, skipped, failed = run_readme(a.readme, os.path.abspath(a.lfm), a.liblfm and os.path.abspath(a.liblfm))
    report(ran, skipped, failed)
    print(f"{len(ran)} commands ran, {len(skipped)} skipped, {len(failed)} failed in {time.time() - t0:.1f} s")
    if len(ran) < a.min_commands:
        print(f"FAILED: only {len(ran)} runnable commands found in {a.readme} (expected at least {a.min_commands})")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
