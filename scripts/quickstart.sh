#!/usr/bin/env bash
# Builds the lfm executable and liblfm.so only (not the tests or benchmarks: scripts/test.sh
# builds those in the same build/ folder, reusing what this built) and runs the model end to end.
#   scripts/quickstart.sh                      → one chat turn with the bundled tiny model (random weights)
#   scripts/quickstart.sh -m LiquidAI/LFM2-1.2B -p "The capital of France is" [more `lfm generate` options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh release lfm lfm_shared >&2
if [ $# -eq 0 ]; then
  model=models/tiny-lfm2
  turn="Hello! Who are you?"
  echo "== lfm chat with the bundled tiny model ($model), one turn: \"$turn\"" >&2
  echo "   Its weights are RANDOM: the reply is text from its real tokenizer, but it means nothing." >&2
  echo "$turn" | build/lfm chat -m "$model" -n 32
  cat >&2 <<'NEXT'
== Next, a real model (downloaded once into the Hugging Face cache, then offline):
   build/lfm chat -m LiquidAI/LFM2-1.2B
   scripts/quickstart.sh -m LiquidAI/LFM2-1.2B -p "The capital of France is"
   or your own files: build/lfm chat -m /path/to/LFM2-1.2B (a Hugging Face folder) or -m /path/to/model.gguf
   build/lfm --help lists every command (README.md: Quick start, Commands, Serving).
NEXT
  exit 0
fi
exec build/lfm generate "$@"
