// Which storage type each tensor gets for a requested GGUF file type, following llama.cpp's
// choices (convert_hf_to_gguf for f32/f16/bf16/q8_0, llama-quantize's llama_tensor_get_type at
// llama.cpp 84f7129 for the block and K-quant mixes) so our files hold the same type mix a
// llama.cpp user would get:
//   * 1-D tensors (norms, biases), the short-conv kernel {K, d}, the MoE router ffn_gate_inp and
//     exp_probs_b stay F32 in every file type (ggml's ssm_conv reads F32 kernels).
//   * f16 / bf16 / q8_0: every other tensor in that type; q8_0 falls back to F16 when a row length
//     is not a multiple of 32 (as the converter does).
//   * q4_0, q4_1, q5_0, q5_1, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k
//     (llama-quantize rules, no imatrix): every matrix in the base type (Q3_K for q3_k_*, Q4_K
//     for q4_k_*, Q5_K for q5_k_*) except
//       - the output matrix (output.weight, or token_embd.weight when embeddings are tied) gets
//         Q6_K, or Q8_0 when its row length is not a multiple of the base type's block size;
//       - q4_k_m / q5_k_m: Q6_K for attn_v in the "use_more_bits" attention layers and for
//         ffn_down (and ffn_down_exps) in the use_more_bits layers;
//       - q4_k_s: Q5_K for attn_v in the first 4 attention layers and for ffn_down in the first
//         n_layers/8 layers;
//       - q3_k_m: attn_v Q5_K in the first 2 attention layers and Q4_K after, ffn_down Q5_K in
//         the first n_layers/16 layers and Q4_K after, attn_output Q4_K; q3_k_l: Q5_K for all
//         three; q3_k_s: none;
//       - with exactly 8 experts attn_v and attn_k are Q8_0, and attn_output Q5_K in q3_k_s/m
//         and q4_k_s/m (q3_k_l keeps Q3_K there);
//       - use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2, where attn_v is counted
//         over attention layers only (conv layers have none) and ffn_down over all layers;
//       - a K-quant on a row length that is not a multiple of 256 falls back like llama.cpp:
//         Q3_K → Q4_0, Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, and to F16 if even that block size
//         does not fit;
//         Q4_0 on a row length not a multiple of 32 falls back to F16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace lfm::gguf {

// llama_ftype values written to general.file_type.
enum class FileType : int32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 7, Q5_0 = 8, Q5_1 = 9,
  Q3_K_S = 11, Q3_K_M = 12, Q3_K_L = 13, Q4_K_S = 14, Q4_K_M = 15, Q5_K_S = 16, Q5_K_M = 17, Q6_K = 18, BF16 = 32
};

// Every file type, in the order the CLI lists them.
const std::vector<FileType>& all_file_types();
// "f32, f16, bf16, q8_0, ..." for help texts and errors.
std::string file_type_names();
// A file type's lower-case name (case-insensitive); throws naming the choices on anything else.
FileType parse_file_type(const std::string& name);
const char* file_type_label(FileType t);  // "Q4_K_M", ...

class QuantPolicy {
 public:
  QuantPolicy(FileType ft, const ModelConfig& cfg);
  // ne: ggml dims of the tensor (ne[0] = row length); name: its GGUF name.
  DType choose(const std::string& gguf_name, const std::vector<int64_t>& ne) const;

 private:
  FileType ft_;
  bool has_output_;            // untied lm_head present
  int64_t n_layers_;
  int64_t n_experts_;
  std::vector<int64_t> attn_index_;  // layer → index among attention layers (-1 for conv)
  int64_t n_attn_;
};

// llama.cpp's layer-selection rule for the "more bits" layers of *_M K-quant mixes.
bool use_more_bits(int64_t i_layer, int64_t n_layers);

}  // namespace lfm::gguf
