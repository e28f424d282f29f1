// How much state a model needs and how to size its StateCache: the model's state shape, the
// default storage type for its checkpoint, and a pool plan from a context size × parallel
// sequences or from a memory budget.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cache/state_cache.h"
#include "model/config.h"

namespace lfm {

class Model;

StateShape state_shape(const ModelConfig& cfg);

// The storage type a checkpoint's state keeps by default, as its reference runtime does:
// bf16 / f16 safetensors keep K/V in their dtype (transformers), GGUF files f16 (llama.cpp),
// float32 checkpoints float32. Conv states use the same type.
DType default_state_type(const Model& model);
// For a config alone (no weights): its declared dtype.
DType default_state_type(const ModelConfig& cfg);

// What a user asks for.
struct StatePlanOptions {
  int64_t ctx_size = 4096;   // most tokens per sequence
  int64_t parallel = 1;      // sequences at once (conv slots)
  int64_t block_tokens = 16;
  std::optional<DType> type;  // unset: the checkpoint's default (default_state_type)
  int64_t memory_bytes = 0;  // KV + snapshot budget; 0: enough for ctx_size × parallel
  bool prefix_cache = true;
  int64_t draft_tokens = 0;  // room for speculative steps of up to this many drafted tokens
  int64_t pad_rows = 0;      // StateCacheOptions::pad_rows (Backend::decode_step_max_pad)
};

// Blocks for ctx_size × parallel tokens, or as many as memory_bytes holds (at least one
// sequence's full context). Throws on impossible requests, naming the numbers.
StateCacheOptions plan_state_cache(const ModelConfig& cfg, const StatePlanOptions& opt);
// The memory_bytes whose plan holds exactly `blocks` blocks (plan_state_cache's inverse: the
// blocks' KV and snapshots plus opt.pad_rows pad blocks' KV).
int64_t kv_memory_for_blocks(const ModelConfig& cfg, const StatePlanOptions& opt, int64_t blocks);
// The plan for a loaded model (its default type when none is given), allocated in `memory` (the
// backend's that will run it).
std::unique_ptr<StateCache> make_state_cache(const Model& model, const StatePlanOptions& opt,
                                             DeviceMemory& memory = host_memory());

// Parses "f32" / "float32", "f16" / "float16", "bf16" / "bfloat16" (case-insensitive); "auto" → fallback.
DType parse_state_type(const std::string& name, DType fallback);
// Parses a byte count: "1500000000", "512M", "1.5G", "2GiB" (K/M/G/T are powers of 1024).
int64_t parse_byte_size(const std::string& text);

}  // namespace lfm
