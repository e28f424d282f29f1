#include "convert/quant_policy.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "core/text.h"

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
    case DType::Q3_K: alt = DType::Q4_0; break;
    case DType::Q4_K: alt = DType::Q5_0; break;
    case DType::Q5_K: alt = DType::Q5_1; break;
    case DType::Q6_K: alt = DType::Q8_0; break;
    default: break;
  }
  return row % dtype_traits(alt).block_elems == 0 ? alt : DType::F16;
}

}  // namespace

// Every file type with its label, in the order the CLI lists them.
constexpr std::pair<FileType, const char*> kFileTypes[] = {
    {FileType::F32, "F32"},       {FileType::F16, "F16"},       {FileType::BF16, "BF16"},     {FileType::Q8_0, "Q8_0"},
    {FileType::Q4_0, "Q4_0"},     {FileType::Q4_1, "Q4_1"},     {FileType::Q5_0, "Q5_0"},     {FileType::Q5_1, "Q5_1"},
    {FileType::Q3_K_S, "Q3_K_S"}, {FileType::Q3_K_M, "Q3_K_M"}, {FileType::Q3_K_L, "Q3_K_L"}, {FileType::Q4_K_S, "Q4_K_S"},
    {FileType::Q4_K_M, "Q4_K_M"}, {FileType::Q5_K_S, "Q5_K_S"}, {FileType::Q5_K_M, "Q5_K_M"}, {FileType::Q6_K, "Q6_K"},
};

const std::vector<FileType>& all_file_types() {
  static const std::vector<FileType> all = [] {
    std::vector<FileType> v;
    for (const auto& [t, label] : kFileTypes) v.push_back(t);
    return v;
  }();
  return all;
}

const char* file_type_label(FileType t) {
  for (const auto& [type, label] : kFileTypes)
    if (type == t) return label;
  return "?";
}

std::string file_type_names() {
  std::string out;
  for (FileType t : all_file_types()) out += (out.empty() ? "" : ", ") + ascii_lower(file_type_label(t));
  return out;
}

FileType parse_file_type(const std::string& name) {
  const std::string s = ascii_lower(name);
  for (FileType t : all_file_types())
    if (s == ascii_lower(file_type_label(t))) return t;
  fail("convert: unknown type '", name, "' (one of ", file_type_names(), ")");
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
  DType base = DType::F16;
  switch (ft_) {
    case FileType::F32: return DType::F32;
    case FileType::F16: return DType::F16;
    case FileType::BF16: return DType::BF16;
    case FileType::Q8_0: return row % 32 == 0 ? DType::Q8_0 : DType::F16;
    case FileType::Q4_0: base = DType::Q4_0; break;
    case FileType::Q4_1: base = DType::Q4_1; break;
    case FileType::Q5_0: base = DType::Q5_0; break;
    case FileType::Q5_1: base = DType::Q5_1; break;
    case FileType::Q3_K_S:
    case FileType::Q3_K_M:
    case FileType::Q3_K_L: base = DType::Q3_K; break;
    case FileType::Q4_K_S:
    case FileType::Q4_K_M: base = DType::Q4_K; break;
    case FileType::Q5_K_S:
    case FileType::Q5_K_M: base = DType::Q5_K; break;
    case FileType::Q6_K: base = DType::Q6_K; break;
  }
  const bool k_m = ft_ == FileType::Q4_K_M || ft_ == FileType::Q5_K_M;
  const bool q4_k = ft_ == FileType::Q4_K_S || ft_ == FileType::Q4_K_M;
  DType t = base;
  const bool is_output = name == "output.weight" || (!has_output_ && name == "token_embd.weight");
  const int64_t layer = block_index(name);
  if (is_output) {
    t = row % dtype_traits(base).block_elems != 0 ? DType::Q8_0 : DType::Q6_K;
  } else if (contains(name, "attn_v.weight")) {
    const int64_t i = layer >= 0 && layer < static_cast<int64_t>(attn_index_.size()) ? attn_index_[layer] : -1;
    if (ft_ == FileType::Q3_K_M) t = i >= 0 && i < 2 ? DType::Q5_K : DType::Q4_K;
    else if (ft_ == FileType::Q3_K_L) t = DType::Q5_K;
    else if (k_m && i >= 0 && use_more_bits(i, n_attn_)) t = DType::Q6_K;
    else if (ft_ == FileType::Q4_K_S && i >= 0 && i < 4) t = DType::Q5_K;
    if (n_experts_ == 8) t = DType::Q8_0;  // llama.cpp: cheap for 8-expert models
  } else if (contains(name, "attn_k.weight")) {
    if (n_experts_ == 8) t = DType::Q8_0;
  } else if (contains(name, "attn_output.weight")) {
    if (n_experts_ == 8) {
      if (q4_k || ft_ == FileType::Q3_K_S || ft_ == FileType::Q3_K_M) t = DType::Q5_K;
    } else if (ft_ == FileType::Q3_K_M) {
      t = DType::Q4_K;
    } else if (ft_ == FileType::Q3_K_L) {
      t = DType::Q5_K;
    }
  } else if (contains(name, "ffn_down")) {
    if (ft_ == FileType::Q3_K_M) t = layer >= 0 && layer < n_layers_ / 16 ? DType::Q5_K : DType::Q4_K;
    else if (ft_ == FileType::Q3_K_L) t = DType::Q5_K;
    else if (k_m && layer >= 0 && use_more_bits(layer, n_layers_)) t = DType::Q6_K;
    else if (ft_ == FileType::Q4_K_S && layer >= 0 && layer < n_layers_ / 8) t = DType::Q5_K;
  }
  return fit_row(t, row);
}

}  // namespace lfm::gguf
