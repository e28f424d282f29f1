// A retriever's head in a GGUF file, both ways (issue 57). llama.cpp's converter (conversion/lfm2.py,
// LFM2ColBertModel) keeps the architecture `lfm2` and writes:
//   lfm2.attention.causal = false    the bidirectional backbone (Lfm2BidirectionalModel)
//   lfm2.pooling_type                from 1_Pooling (llama.cpp's enum: NONE 0, MEAN 1, CLS 2, LAST 3,
//                                    RANK 4); absent for ColBERT (no Pooling module)
//   tensor dense_2.weight            PyLate's 1_Dense linear.weight, ggml {d, out}
//   lfm2.embedding_length_out        out, the Dense width
// llama.cpp has no sentence-transformers prompts and no PyLate processing, so those facts travel in
// keys of lfm's own, documented here, that llama.cpp ignores (it reads only the keys it knows):
//   lfm2.retrieval.kind                        "embedding" | "colbert"
//   lfm2.retrieval.normalize                   bool (a Normalize module; PyLate always)
//   lfm2.retrieval.max_tokens                  u32 (sentence_bert_config max_seq_length; 0: none)
//   lfm2.retrieval.query_prompt / document_prompt     strings (sentence-transformers prompts)
//   lfm2.retrieval.query_prefix / document_prefix     strings (PyLate markers)
//   lfm2.retrieval.query_length / document_length     u32
//   lfm2.retrieval.do_query_expansion / attend_to_expansion_tokens   bool
//   lfm2.retrieval.skiplist_words              array of strings
// A file written by llama.cpp's converter has none of these: a ColBERT file (dense_2.weight) then
// gets PyLate's defaults for an absent key, a pooled file sentence-transformers' (no prompts, no
// Normalize module, no length limit).
// Kept free of kernels (like gguf_source.cpp) so hostile metadata can be fuzzed through it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/gguf_reader.h"
#include "formats/tensor_source.h"
#include "model/config.h"
#include "model/retrieval.h"

namespace lfm::gguf {

// llama.cpp's names.
inline constexpr const char* kDenseTensor = "dense_2.weight";
inline constexpr const char* kDenseBias = "dense_2.bias";

// Whether the file holds a retriever (a pooling type, a Dense projection, lfm's retrieval keys or a
// non-causal backbone): such a model has no LM head.
bool gguf_is_retriever(const GgufFile& f, const std::string& arch);

// The head's config (nullopt: the file names no head). Throws lfm::Error naming the key for a
// pooling type outside llama.cpp's enum or one lfm does not implement (RANK), a Dense tensor
// without <arch>.embedding_length_out or whose shape differs from it and from the hidden size,
// the key without the tensor, a Dense bias, or a malformed retrieval.* key.
std::optional<RetrievalConfig> retrieval_config_from_gguf(const GgufFile& f, const ModelConfig& cfg);

// dense_2.weight presented as a Dense module: one tensor "linear.weight" [out, d], what
// RetrievalHead reads; a copy of the bytes, so it outlives the Model letting go of the file. Null
// when the file has none.
std::shared_ptr<const TensorSource> gguf_dense_source(const GgufFile& file);

// The metadata that writes `r` back (the keys above, under `arch`). attention.causal is a fact
// of the backbone and comes with the model's metadata (convert/gguf_export.h).
std::vector<std::pair<std::string, Value>> retrieval_metadata(const RetrievalConfig& r, const std::string& arch);

}  // namespace lfm::gguf
