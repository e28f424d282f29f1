// Embeddings and relevance scores from a retriever (issue 57): texts → token ids as the model's
// sentence-transformers / PyLate files prescribe (model/retrieval.h), batched through the
// encoder (model/encoder.h), pooled and normalised on the host; cosine scores for a dense model,
// MaxSim for ColBERT. A text's result never depends on the other texts of the call.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/encoder.h"
#include "model/retrieval.h"

namespace lfm {

class Tokenizer;

// Whom a text is written as: the model's query or document prompt / prefix, or neither (plain).
enum class InputRole { kPlain, kQuery, kDocument };
const char* input_role_name(InputRole r);
// "query", "document", "none" (lfm::Error otherwise).
InputRole parse_input_role(const std::string& name);

// A text as it enters the model.
struct PreparedText {
  std::vector<int32_t> ids;
  int64_t keys = 0;             // attention keys (EncoderText::keys): 0 all
  std::vector<uint8_t> scored;  // per token, whether MaxSim reads its vector (empty: all)
  int64_t input_tokens = 0;     // tokens of the text itself, before prompts / expansion (usage)
  bool truncated = false;
};

// One text's vectors: one row (pooled) or one per token, `dim` wide.
struct Embedding {
  int64_t rows = 0, dim = 0;
  std::vector<float> values;    // [rows, dim]
  std::vector<uint8_t> scored;  // per row, as PreparedText::scored (empty: all)
  const float* row(int64_t r) const { return values.data() + r * dim; }
};

struct EmbedderOptions {
  int64_t batch_tokens = 8192;  // tokens per encoder pass (activations scale with it)
  // Overrides of the model's head config (a generative model served with --embeddings has none).
  std::optional<Pooling> pooling;
  std::optional<bool> normalize;
};

class Embedder {
 public:
  // `tokenizer` may be null (token ids only). The model's retrieval head (Model::retrieval)
  // gives the defaults; a base model without one pools nothing unless asked.
  Embedder(const Model& model, const Tokenizer* tokenizer, Backend& backend, EmbedderOptions options = {});

  // The config the model was given (defaults for a bare base model).
  const RetrievalConfig& config() const { return cfg_; }
  const Model& model() const { return model_; }
  bool colbert() const { return cfg_.colbert(); }
  int64_t dim() const;  // the width of a vector (the Dense width for ColBERT)
  // The most tokens a text may have as it enters the model: prepare() cuts texts to it, ids
  // given as they are must fit (max_seq_length, the ColBERT lengths, the model's positions).
  int64_t max_tokens() const;

  // Text → ids: prompt or prefix for the role, the tokenizer's special tokens, truncation to
  // the role's length, query expansion. lfm::Error for invalid UTF-8 or without a tokenizer.
  PreparedText prepare(std::string_view text, InputRole role) const;
  // Token ids given by the caller, used as they are (documents still get their skiplist mask).
  PreparedText prepare_ids(std::vector<int32_t> ids, InputRole role) const;

  // Every text's vectors, in order; `pooling` overrides the model's (kNone: per token).
  std::vector<Embedding> embed(std::span<const PreparedText> texts, std::optional<Pooling> pooling = std::nullopt);

  // Relevance of a document to a query: MaxSim (Σ over the query's rows of the best dot product
  // with a scored document row) for per-token vectors, else the cosine of the pooled vectors.
  static double score(const Embedding& query, const Embedding& document);

 private:
  void run_batch(std::span<const PreparedText> texts, EncoderRows rows, std::vector<float>& out);
  void mark_skiplist(PreparedText& p) const;

  const Model& model_;
  const Tokenizer* tokenizer_;
  Encoder encoder_;
  EmbedderOptions limits_;
  RetrievalConfig cfg_;
  const TensorView* dense_ = nullptr;
  std::vector<int32_t> skiplist_ids_;  // sorted
  std::optional<int32_t> query_marker_, document_marker_, expansion_id_;
};

}  // namespace lfm
