#!/usr/bin/env bash
# Builds the lfm executable only (not the tests or benchmarks: scripts/test.sh builds those in
# the same build/ folder, reusing what this built) and runs generation end to end.
#   scripts/quickstart.sh                      → the bundled tiny test model (random weights)
#   scripts/quickstart.sh -m /path/to/LFM2-1.2B [more `lfm generate` options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh release lfm >&2
if [ $# -eq 0 ]; then
  echo "== lfm generate on the bundled tiny LFM2 test model (tests/data/hf/lfm2_c_layertypes_untied_convbias_f32)" >&2
  exec build/lfm generate -m tests/data/hf/lfm2_c_layertypes_untied_convbias_f32 --prompt-ids 1,17,200,45,3 -n 24 --ignore-eos
fi
exec build/lfm generate "$@"
