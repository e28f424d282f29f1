// Limits on every size lfm accepts from a file or a request (config.json, GGUF metadata,
// tokenizer files), in one place. Each is far above any released model (LFM2 and the largest
// public checkpoints) and low enough that products of them cannot overflow int64 — a config
// with hidden_size = 2^62 is refused with its key and value before any arithmetic or allocation.
// Worst products the code forms: experts x FFN x hidden x layers x 3 < 2^61; vocab x hidden <
// 2^38; positions x per-token KV bytes (layers x 2 x heads x head_dim x 4) < 2^62.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lfm::limits {

constexpr int64_t kMaxLayers = 1024;              // num_hidden_layers / block_count
constexpr int64_t kMaxHiddenSize = 1 << 16;       // hidden_size / embedding_length
constexpr int64_t kMaxHeads = 1 << 10;            // attention and KV heads
constexpr int64_t kMaxHeadDim = 1 << 12;          // head_dim / key_length
constexpr int64_t kMaxFfnDim = 1 << 20;           // dense and expert FFN widths, block_multiple_of
constexpr int64_t kMaxExperts = 4096;             // num_experts / expert_count
constexpr int64_t kMaxConvKernel = 256;           // conv_L_cache / shortconv.l_cache
constexpr int64_t kMaxPositions = int64_t(1) << 24;  // max_position_embeddings / context_length
// Vocabulary size; every token id (vocab entries, added tokens, bos/eos/pad, ids given to the
// CLI or server) is in [0, kMaxVocabSize). Tables sized by the largest id stay below ~200 MB.
constexpr int64_t kMaxVocabSize = int64_t(1) << 22;
// Length of one added token's content (real ones are under 100 bytes). The added-token trie
// costs ~100 bytes of build memory per byte of content.
constexpr size_t kMaxAddedTokenBytes = size_t(1) << 16;

}  // namespace lfm::limits
