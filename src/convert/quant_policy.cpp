#include "convert/quant_policy.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/error.h"

namespace lfm::gguf {

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

int64_t block_index(const std::string& name) {
  int layer = -1;
  return std::sscanf(name.c_str(), "blk.%d.", &layer) == 1 ? layer : -1;
}

// llama.cpp's fallback for a type whose block does not divide the row length.
DType fit_row(DType t, int64_t row) {
  if (row % dtype_traits(t).block_elems == 0) return t;
  DType alt = DType::F16;
  switch (t) {
    case DType::Q4_K: alt = DType::Q5_0; break;
    case DType::Q5_K: alt = DType::Q5_1; break;
    case DType::Q6_K: alt = DType::Q8_0; break;
    default: break;
  }
  return row % dtype_traits(alt).block_elems == 0 ? alt : DType::F16;
}

}  // namespace

FileType parse_file_type(const std::string& name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "f32") return FileType::F32;
  if (s == "f16") return FileType::F16;
  if (s == "bf16") return FileType::BF16;
  if (s == "q8_0") return FileType::Q8_0;
  if (s == "q4_0") return FileType::Q4_0;
  if (s == "q4_k_m") return FileType::Q4_K_M;
  fail("convert: unknown type '", name, "' (one of f32, f16, bf16, q8_0, q4_0, q4_k_m)");
}

const char* file_type_label(FileType t) {
  switch (t) {
    case FileType::F32: return "F32";
    case FileType::F16: return "F16";
    case FileType::BF16: return "BF16";
    case FileType::Q8_0: return "Q8_0";
    case FileType::Q4_0: return "Q4_0";
    case FileType::Q4_K_M: return "Q4_K_M";
  }
  return "?";
}

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

QuantPolicy::QuantPolicy(FileType ft, const ModelConfig& cfg)
    : ft_(ft), has_output_(!cfg.tie_embeddings), n_layers_(cfg.n_layers), n_experts_(cfg.n_experts), n_attn_(0) {
  for (LayerKind k : cfg.layer_kinds) attn_index_.push_back(k == LayerKind::Attention ? n_attn_++ : -1);
}

DType QuantPolicy::choose(const std::string& name, const std::vector<int64_t>& ne) const {
  // Always F32: vectors, the conv kernel, the router and its bias.
  if (ne.size() < 2 || !name.ends_with(".weight") || contains(name, "shortconv.conv.weight") ||
      contains(name, "ffn_gate_inp.weight"))
    return DType::F32;
  const int64_t row = ne[0];
  switch (ft_) {
    case FileType::F32: return DType::F32;
    case FileType::F16: return DType::F16;
    case FileType::BF16: return DType::BF16;
    case FileType::Q8_0: return row % 32 == 0 ? DType::Q8_0 : DType::F16;
    case FileType::Q4_0:
    case FileType::Q4_K_M: break;
  }
  const DType base = ft_ == FileType::Q4_0 ? DType::Q4_0 : DType::Q4_K;
  DType t = base;
  const bool is_output = name == "output.weight" || (!has_output_ && name == "token_embd.weight");
  const int64_t layer = block_index(name);
  if (is_output) {
    t = row % dtype_traits(base).block_elems != 0 ? DType::Q8_0 : DType::Q6_K;
  } else if (contains(name, "attn_v.weight")) {
    const int64_t i = layer >= 0 && layer < static_cast<int64_t>(attn_index_.size()) ? attn_index_[layer] : -1;
    if (ft_ == FileType::Q4_K_M && i >= 0 && use_more_bits(i, n_attn_)) t = DType::Q6_K;
    if (n_experts_ == 8) t = DType::Q8_0;  // llama.cpp: cheap for 8-expert models
  } else if (contains(name, "attn_output.weight")) {
    if (ft_ == FileType::Q4_K_M && n_experts_ == 8) t = DType::Q5_K;
  } else if (contains(name, "ffn_down")) {
    if (ft_ == FileType::Q4_K_M && layer >= 0 && use_more_bits(layer, n_layers_)) t = DType::Q6_K;
  }
  return fit_row(t, row);
}

}  // namespace lfm::gguf
