#include "model/state_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/gguf_model.h"
#include "model/model.h"

namespace lfm {

StateShape state_shape(const ModelConfig& cfg) {
  StateShape s;
  s.attn_layers = cfg.n_attention_layers();
  s.kv_heads = cfg.n_kv_heads;
  s.head_dim = cfg.head_dim;
  s.conv_layers = cfg.n_conv_layers();
  s.conv_dim = cfg.hidden_size;
  s.conv_kernel = cfg.conv_kernel;
  return s;
}

DType default_state_type(const ModelConfig& cfg) {
  if (cfg.dtype == "bfloat16") return DType::BF16;
  if (cfg.dtype == "float16") return DType::F16;
  if (cfg.dtype == "float32") return DType::F32;
  return DType::F16;  // quantized GGUF file types
}

DType default_state_type(const Model& model) {
  if (dynamic_cast<const gguf::GgufTensorSource*>(&model.source())) return DType::F16;
  switch (model.weights().embed.dtype) {
    case DType::BF16: return DType::BF16;
    case DType::F16: return DType::F16;
    case DType::F32: return DType::F32;
    default: return default_state_type(model.config());
  }
}

StateCacheOptions plan_state_cache(const ModelConfig& cfg, const StatePlanOptions& o) {
  LFM_CHECK(o.ctx_size >= 1, "state: --ctx-size must be positive, got ", o.ctx_size);
  LFM_CHECK(o.parallel >= 1 && o.parallel <= 65536, "state: --parallel must be in [1, 65536], got ", o.parallel);
  LFM_CHECK(o.block_tokens >= 1 && o.block_tokens <= 65536, "state: --kv-block-size must be in [1, 65536], got ",
            o.block_tokens);
  LFM_CHECK(o.memory_bytes >= 0, "state: --kv-memory must not be negative, got ", o.memory_bytes);
  StateCacheOptions c;
  c.block_tokens = o.block_tokens;
  c.type = o.type ? *o.type : default_state_type(cfg);
  c.n_slots = o.parallel;
  c.prefix_cache = o.prefix_cache;
  c.draft_tokens = o.draft_tokens;
  c.pad_rows = o.pad_rows;
  const int64_t per_seq = (o.ctx_size + o.block_tokens - 1) / o.block_tokens;
  if (o.memory_bytes == 0) {
    LFM_CHECK(per_seq <= (int64_t{1} << 30) / o.parallel, "state: ", o.parallel, " sequences of ", o.ctx_size,
              " tokens need too many blocks");
    c.n_blocks = per_seq * o.parallel;
  } else {
    c.n_blocks = 1;
    const StateBytes b = state_bytes(state_shape(cfg), c);
    const size_t per_block = std::max<size_t>(1, b.kv_per_block + b.snapshot_per_block);
    // The budget holds the pad rows' KV blocks too (a GPU's padded decode steps, at most
    // Backend::decode_step_max_pad): kv_total + snapshots_total stays within it.
    const size_t budget = static_cast<size_t>(o.memory_bytes);
    const size_t pad_bytes = b.kv_per_block * static_cast<size_t>(std::max<int64_t>(o.pad_rows, 0));
    c.n_blocks = budget > pad_bytes ? static_cast<int64_t>((budget - pad_bytes) / per_block) : 0;
    LFM_CHECK(c.n_blocks >= per_seq, "state: --kv-memory ", o.memory_bytes, " bytes holds ", c.n_blocks,
              " blocks of ", o.block_tokens, " tokens (", per_block, " bytes each",
              pad_bytes ? " after " + std::to_string(o.pad_rows) + " pad rows' blocks" : std::string(),
              "), fewer than one sequence of ", o.ctx_size, " tokens needs (", per_seq, ")");
  }
  return c;
}

int64_t kv_memory_for_blocks(const ModelConfig& cfg, const StatePlanOptions& opt, int64_t blocks) {
  StatePlanOptions o = opt;
  o.memory_bytes = 0;
  StateCacheOptions c = plan_state_cache(cfg, o);
  c.n_blocks = 1;
  const StateBytes b = state_bytes(state_shape(cfg), c);
  return static_cast<int64_t>(static_cast<size_t>(blocks) * (b.kv_per_block + b.snapshot_per_block) +
                              static_cast<size_t>(std::max<int64_t>(o.pad_rows, 0)) * b.kv_per_block);
}

std::unique_ptr<StateCache> make_state_cache(const Model& model, const StatePlanOptions& opt, DeviceMemory& memory) {
  StatePlanOptions o = opt;
  if (!o.type) o.type = default_state_type(model);
  return std::make_unique<StateCache>(state_shape(model.config()), plan_state_cache(model.config(), o), memory);
}

DType parse_state_type(const std::string& name, DType fallback) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (n == "auto" || n.empty()) return fallback;
  if (n == "f32" || n == "float32") return DType::F32;
  if (n == "f16" || n == "float16") return DType::F16;
  if (n == "bf16" || n == "bfloat16") return DType::BF16;
  fail("state: unknown cache type '", name, "' (use f32, f16, bf16 or auto)");
}

int64_t parse_byte_size(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("state: '", text, "' is not a byte size (e.g. 1500000000, 512M, 1.5G)");
  }
  std::string unit = text.substr(used);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char ch) { return std::toupper(ch); });
  double scale = 1;
  if (unit == "" || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  else fail("state: '", text, "' has an unknown unit '", unit, "' (use K, M, G or T)");
  const double bytes = v * scale;
  LFM_CHECK(std::isfinite(bytes) && bytes >= 0 && bytes < 9.0e18, "state: byte size '", text, "' is out of range");
  return static_cast<int64_t>(bytes);
}

}  // namespace lfm
