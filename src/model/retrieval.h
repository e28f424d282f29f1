// What turns a retriever's hidden states into what it is used for (issue 57), as the checkpoint's
// sentence-transformers / PyLate files say:
//   LFM2.5-Embedding: modules.json = Transformer → Pooling (1_Pooling/config.json: CLS) →
//     Normalize; config_sentence_transformers.json `prompts` ("query: ", "document: ");
//     sentence_bert_config.json `max_seq_length`. One vector per text, scored by cosine.
//   ColBERT (LFM2.5-ColBERT, LFM2-ColBERT; PyLate): Transformer → Dense (1_Dense: a bias-free
//     d → 128 projection); every token's vector L2-normalised; query/document prefixes, query
//     expansion to `query_length`, `document_length`, a skiplist of punctuation for documents
//     (config_sentence_transformers.json). Scored by MaxSim.
// GGUF files carry the same facts as metadata (model/gguf_retrieval.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "formats/tensor_source.h"
#include "kernels/weight_set.h"

namespace lfm {

class Backend;

// How a text's token vectors become its vector: the first token's (CLS), their mean, the last
// token's, or none (every token keeps its own: ColBERT, or `--pooling none`).
enum class Pooling { kCls, kMean, kLast, kNone };
const char* pooling_name(Pooling p);
// "cls", "mean", "last", "none" (lfm::Error naming the value otherwise).
Pooling parse_pooling(const std::string& name);

struct RetrievalConfig {
  enum class Kind { kEmbedding, kColbert };
  Kind kind = Kind::kEmbedding;
  Pooling pooling = Pooling::kCls;  // kNone for ColBERT
  bool normalize = true;            // L2 per vector (Normalize module; PyLate always)
  int64_t max_tokens = 0;           // texts are cut to this many tokens (0: the model's positions)
  // Text put before a query / a document (sentence-transformers prompts).
  std::string query_prompt, document_prompt;
  // PyLate (ColBERT): each text's marker token, its query expansion and its lengths.
  std::string query_prefix, document_prefix;
  int64_t query_length = 0, document_length = 0;
  bool do_query_expansion = true;
  bool attend_to_expansion_tokens = false;
  std::vector<std::string> skiplist_words;  // document tokens of these words are not scored
  int64_t dense_out = 0;                    // the Dense projection's width (0: none)

  bool colbert() const { return kind == Kind::kColbert; }
};

// A retriever's head: its config and the Dense projection (ColBERT), prepared for a backend.
class RetrievalHead {
 public:
  // `dense` names the projection "linear.weight" [out, d] (null: none).
  RetrievalHead(RetrievalConfig cfg, std::shared_ptr<const TensorSource> dense, int64_t hidden_size,
                Backend* backend);
  const RetrievalConfig& config() const { return cfg_; }
  // The Dense projection [out, d] as the backend reads it, or null.
  const TensorView* dense() const { return dense_src_ ? &dense_ : nullptr; }

 private:
  RetrievalConfig cfg_;
  std::shared_ptr<const TensorSource> dense_src_;
  TensorView dense_;
  std::unique_ptr<PreparedWeights> prepared_;
};

// The sentence-transformers / PyLate files of a checkpoint folder (nullopt: it has none, it is
// not a retriever). Throws lfm::Error naming the file and key for anything malformed.
std::optional<RetrievalConfig> read_retrieval_config(const std::string& folder, int64_t hidden_size);
// The Dense module's weights of a checkpoint folder (its model.safetensors: "linear.weight"), or
// null when modules.json names no Dense module.
std::shared_ptr<const TensorSource> open_dense_module(const std::string& folder);
// The head of a checkpoint folder (its Dense weights from the module's folder), or null.
std::shared_ptr<const RetrievalHead> load_retrieval_head(const std::string& folder, int64_t hidden_size,
                                                         Backend* backend);

}  // namespace lfm
