// Tensor names of llama.cpp's LFM2 / LFM2-MoE GGUF layout and their Hugging Face equivalents
// (LFM2_SPEC.md §2.3). Shapes: GGUF stores ggml order {ne0, ne1, ...} = the PyTorch shape reversed;
// the conv kernel is squeezed ([d, 1, K] ↔ {K, d}); MoE experts are stacked per layer
// (E × [Fm, d] ↔ {d, Fm, E}).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lfm::gguf {

// A GGUF name parsed into its Hugging Face meaning.
struct MappedName {
  std::string hf;        // e.g. "model.layers.3.conv.conv.weight"; for stacked experts the
                         // per-expert name with "{e}" in place of the expert index
  int64_t layer = -1;    // block index, -1 for global tensors
  bool experts = false;  // ffn_{gate,up,down}_exps: split along the outermost dim
};

// GGUF → HF; nullopt for names outside the LFM2 layout.
std::optional<MappedName> hf_name_from_gguf(const std::string& gguf_name);

// HF → GGUF. Per-expert HF names map to the stacked tensor name (expert index in *expert);
// nullopt for names outside the LFM2 layout.
std::optional<std::string> gguf_name_from_hf(const std::string& hf_name, int64_t* expert = nullptr);

// Replaces "{e}" in a MappedName::hf pattern.
std::string expert_name(const std::string& pattern, int64_t e);

}  // namespace lfm::gguf
