#!/usr/bin/env bash
# Installs the Debian packages lfm needs to build and test, if any are missing.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail
PKGS=(build-essential cmake g++ libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev libcli11-dev libpcre2-dev libcpp-httplib-dev libcurl4-openssl-dev libssl-dev
      libjpeg62-turbo-dev libpng-dev libwebp-dev  # image decoding (src/image/)
      libeigen3-dev  # the audio front end's FFT (src/audio/; Eigen's FFT module, header-only)
      libsndfile1-dev libsoxr-dev libvorbis-dev  # audio decoding, resampling (src/audio/audio_decode.h)
      python3 python3-jinja2 python3-jsonschema python3-pytest ccache
      libzmq3-dev libmsgpack-dev python3-zmq python3-msgpack  # KV-cache events (src/server/kv_events.h) and their test's decoder
      clang libclang-rt-14-dev)  # clang + libFuzzer: scripts/fuzz.sh (the suite's fuzz smoke)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js + npm (test oracle for the tokenizer); any install that provides the commands will do.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Tokenizer test oracle: Hugging Face tokenizers.js, pinned by tools/tokenizer/package-lock.json.
# Installed once into tools/tokenizer/node_modules (gitignored); it loads tokenizer.json from disk
# and never downloads anything at run time.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -d "$ROOT/tools/tokenizer/node_modules" ]; then
  echo "setup: installing the tokenizer test oracle (npm ci in tools/tokenizer)" >&2
  npm ci --prefix "$ROOT/tools/tokenizer" --no-audit --no-fund >/dev/null
fi

# Server test client: the official `openai` npm package, pinned by tools/server-tests/package-lock.json.
if [ ! -d "$ROOT/tools/server-tests/node_modules" ]; then
  echo "setup: installing the OpenAI client for server tests (npm ci in tools/server-tests)" >&2
  npm ci --prefix "$ROOT/tools/server-tests" --no-audit --no-fund >/dev/null
fi
