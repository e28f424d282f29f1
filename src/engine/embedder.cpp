#include "engine/embedder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace lfm {

const char* input_role_name(InputRole r) {
  switch (r) {
    case InputRole::kPlain: return "none";
    case InputRole::kQuery: return "query";
    case InputRole::kDocument: return "document";
  }
  return "?";
}

InputRole parse_input_role(const std::string& name) {
  for (InputRole r : {InputRole::kPlain, InputRole::kQuery, InputRole::kDocument})
    if (name == input_role_name(r)) return r;
  fail("input type: '", name, "' is not one of query, document, none");
}

namespace {

// A bare base model (no sentence-transformers files): every token's final hidden state.
RetrievalConfig bare_config() {
  RetrievalConfig c;
  c.pooling = Pooling::kNone;
  c.normalize = false;
  return c;
}

// L2 normalisation as torch.nn.functional.normalize: x / max(‖x‖, 1e-12).
void normalize(float* x, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double norm = std::max(std::sqrt(ss), 1e-12);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] / norm);
}

}  // namespace

Embedder::Embedder(const Model& model, const Tokenizer* tokenizer, Backend& backend, EmbedderOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      encoder_(model, backend),
      limits_(options),
      cfg_(model.retrieval() ? model.retrieval()->config() : bare_config()) {
  if (options.pooling) {
    LFM_CHECK(!cfg_.colbert() || *options.pooling == Pooling::kNone, "embed: a ColBERT model keeps one vector per token; "
              "its pooling cannot be changed to ", pooling_name(*options.pooling));
    cfg_.pooling = *options.pooling;
  }
  if (options.normalize) cfg_.normalize = *options.normalize;
  LFM_CHECK(limits_.batch_tokens > 0, "embed: a batch budget of ", limits_.batch_tokens, " tokens");
  if (model.retrieval()) dense_ = model.retrieval()->dense();
  if (!tokenizer_ || !cfg_.colbert()) return;
  // PyLate: each marker is one token of the vocabulary; so is each skiplist word.
  auto marker = [&](const std::string& token, const char* what) -> std::optional<int32_t> {
    if (token.empty()) return std::nullopt;
    const auto id = tokenizer_->token_to_id(token);
    LFM_CHECK(id, "embed: the ", what, " '", token, "' is not a token of the model's vocabulary");
    return id;
  };
  query_marker_ = marker(cfg_.query_prefix, "query prefix");
  document_marker_ = marker(cfg_.document_prefix, "document prefix");
  for (const std::string& w : cfg_.skiplist_words)
    if (auto id = tokenizer_->token_to_id(w)) skiplist_ids_.push_back(*id);
  std::sort(skiplist_ids_.begin(), skiplist_ids_.end());
  if (cfg_.do_query_expansion && cfg_.query_length > 0) {
    // PyLate pads queries with the mask token, or the end-of-sequence token where there is none
    // (LFM2's tokenizers have none: <|im_end|>).
    const std::optional<int32_t> mask = tokenizer_->token_to_id("[MASK]");
    const int32_t id = mask ? *mask : tokenizer_->eos_id();
    LFM_CHECK(id >= 0, "embed: query expansion needs the tokenizer's mask or end-of-sequence token, and it has neither");
    expansion_id_ = id;
  }
}

int64_t Embedder::dim() const { return dense_ ? dense_->shape[0] : model_.config().hidden_size; }

int64_t Embedder::max_tokens() const {
  int64_t limit = model_.config().max_position;
  // PyLate sets max_seq_length to a length less one itself (the marker makes up the difference):
  // its own lengths are the limits.
  if (cfg_.colbert() && std::max(cfg_.query_length, cfg_.document_length) > 0)
    return std::min(limit, std::max(cfg_.query_length, cfg_.document_length));
  if (cfg_.max_tokens > 0) limit = std::min(limit, cfg_.max_tokens);
  return limit;
}

PreparedText Embedder::prepare(std::string_view text, InputRole role) const {
  LFM_CHECK(tokenizer_, "embed: the model has no tokenizer; give token ids instead");
  PreparedText p;
  p.input_tokens = static_cast<int64_t>(tokenizer_->encode(text, false).size());
  if (!cfg_.colbert()) {
    // sentence-transformers: the role's prompt before the text, the tokenizer's special tokens,
    // then truncation to max_seq_length.
    const std::string& prompt = role == InputRole::kQuery      ? cfg_.query_prompt
                                : role == InputRole::kDocument ? cfg_.document_prompt
                                                               : std::string();
    // sentence-transformers strips the text (with its prompt) before tokenizing.
    std::string full = prompt + std::string(text);
    const size_t first = full.find_first_not_of(" \t\n\r\f\v"), last = full.find_last_not_of(" \t\n\r\f\v");
    full = first == std::string::npos ? std::string() : full.substr(first, last - first + 1);
    p.ids = tokenizer_->encode(full);
    const int64_t limit = cfg_.max_tokens > 0 ? std::min(cfg_.max_tokens, model_.config().max_position)
                                              : model_.config().max_position;
    if (static_cast<int64_t>(p.ids.size()) > limit) {
      p.ids.resize(static_cast<size_t>(limit));
      p.truncated = true;
    }
    return p;
  }
  // PyLate: the text's tokens (special ones included) cut to the role's length less one, the
  // role's marker token inserted after the first token; a query then padded with the expansion
  // token to query_length (attended to or not, as the config says); a document's skiplist
  // tokens are not scored.
  p.ids = tokenizer_->encode(text);
  const bool query = role == InputRole::kQuery;
  const int64_t length = query ? cfg_.query_length : cfg_.document_length;
  const std::optional<int32_t> marker = query ? query_marker_ : role == InputRole::kDocument ? document_marker_ : std::nullopt;
  if (length > 0 && static_cast<int64_t>(p.ids.size()) > length - (marker ? 1 : 0)) {
    p.ids.resize(static_cast<size_t>(std::max<int64_t>(1, length - (marker ? 1 : 0))));
    p.truncated = true;
  }
  if (marker) p.ids.insert(p.ids.begin() + (p.ids.empty() ? 0 : 1), *marker);
  if (query && expansion_id_ && static_cast<int64_t>(p.ids.size()) < length) {
    const int64_t real = static_cast<int64_t>(p.ids.size());
    p.ids.resize(static_cast<size_t>(length), *expansion_id_);
    if (!cfg_.attend_to_expansion_tokens) p.keys = real;
  }
  if (role == InputRole::kDocument) mark_skiplist(p);
  return p;
}

PreparedText Embedder::prepare_ids(std::vector<int32_t> ids, InputRole role) const {
  LFM_CHECK(!ids.empty(), "embed: an input of no token ids");
  LFM_CHECK(static_cast<int64_t>(ids.size()) <= max_tokens(), "embed: an input of ", ids.size(),
            " token ids, past the model's limit of ", max_tokens());
  const int32_t vocab = static_cast<int32_t>(model_.config().vocab_size);
  for (int32_t id : ids)
    LFM_CHECK(id >= 0 && id < vocab, "embed: token id ", id, " is outside the vocabulary [0, ", vocab, ")");
  PreparedText p;
  p.ids = std::move(ids);
  p.input_tokens = static_cast<int64_t>(p.ids.size());
  if (!cfg_.colbert()) return p;
  // A query given with its expansion: the trailing expansion tokens are not attention keys
  // (their attention mask is 0 in PyLate) unless the config attends to them.
  // Without a tokenizer, the model's end-of-sequence id (what PyLate pads LFM2 queries with).
  int32_t expansion = -1;
  if (expansion_id_) expansion = *expansion_id_;
  else if (!model_.config().eos_token_ids.empty()) expansion = model_.config().eos_token_ids[0];
  if (role == InputRole::kQuery && cfg_.do_query_expansion && !cfg_.attend_to_expansion_tokens && expansion >= 0) {
    int64_t real = static_cast<int64_t>(p.ids.size());
    while (real > 1 && p.ids[static_cast<size_t>(real - 1)] == expansion) --real;
    if (real < static_cast<int64_t>(p.ids.size())) p.keys = real;
  }
  if (role == InputRole::kDocument) mark_skiplist(p);
  return p;
}

void Embedder::mark_skiplist(PreparedText& p) const {
  if (skiplist_ids_.empty()) return;
  p.scored.assign(p.ids.size(), 1);
  for (size_t i = 0; i < p.ids.size(); ++i)
    if (std::binary_search(skiplist_ids_.begin(), skiplist_ids_.end(), p.ids[i])) p.scored[i] = 0;
}

std::vector<Embedding> Embedder::embed(std::span<const PreparedText> texts, std::optional<Pooling> pooling) {
  const Pooling pool = pooling.value_or(cfg_.pooling);
  LFM_CHECK(!cfg_.colbert() || pool == Pooling::kNone, "embed: a ColBERT model keeps one vector per token; its pooling "
            "cannot be changed to ", pooling_name(pool));
  const EncoderRows rows = pool == Pooling::kCls ? EncoderRows::kFirst
                           : pool == Pooling::kLast ? EncoderRows::kLast
                                                    : EncoderRows::kAll;
  const int64_t width = dim();
  std::vector<Embedding> out;
  out.reserve(texts.size());
  std::vector<float> values;
  // Batches of whole texts up to the token budget (a longer text runs alone).
  for (size_t begin = 0; begin < texts.size();) {
    size_t end = begin;
    int64_t tokens = 0;
    while (end < texts.size() &&
           (end == begin || tokens + static_cast<int64_t>(texts[end].ids.size()) <= limits_.batch_tokens))
      tokens += static_cast<int64_t>(texts[end++].ids.size());
    run_batch(texts.subspan(begin, end - begin), rows, values);
    int64_t offset = 0;
    for (size_t i = begin; i < end; ++i) {
      const int64_t n = rows == EncoderRows::kAll ? static_cast<int64_t>(texts[i].ids.size()) : 1;
      Embedding e;
      e.dim = width;
      const float* src = values.data() + offset * width;
      offset += n;
      if (pool == Pooling::kMean) {
        // The mean over the text's tokens (each is attended: no padding here).
        e.rows = 1;
        e.values.assign(static_cast<size_t>(width), 0.0f);
        std::vector<double> sum(static_cast<size_t>(width), 0.0);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < width; ++c) sum[static_cast<size_t>(c)] += src[r * width + c];
        for (int64_t c = 0; c < width; ++c) e.values[static_cast<size_t>(c)] = static_cast<float>(sum[static_cast<size_t>(c)] / static_cast<double>(n));
      } else {
        e.rows = n;
        e.values.assign(src, src + n * width);
        if (pool == Pooling::kNone) e.scored = texts[i].scored;
      }
      if (cfg_.normalize)
        for (int64_t r = 0; r < e.rows; ++r) normalize(e.values.data() + r * width, width);
      out.push_back(std::move(e));
    }
    begin = end;
  }
  return out;
}

void Embedder::run_batch(std::span<const PreparedText> texts, EncoderRows rows, std::vector<float>& out) {
  std::vector<EncoderText> batch;
  batch.reserve(texts.size());
  for (const PreparedText& t : texts) batch.push_back({t.ids, t.keys});
  encoder_.run(batch, rows, dense_, out);
}

double Embedder::score(const Embedding& query, const Embedding& document) {
  LFM_CHECK(query.dim == document.dim, "score: a query of width ", query.dim, " and a document of width ",
            document.dim);
  auto dot = [&](const float* a, const float* b) {
    double s = 0;
    for (int64_t c = 0; c < query.dim; ++c) s += static_cast<double>(a[c]) * b[c];
    return s;
  };
  if (query.rows == 1 && document.rows == 1 && query.scored.empty() && document.scored.empty()) {
    // Cosine (sentence-transformers' similarity for these models; their vectors need not be unit).
    const double na = std::sqrt(dot(query.row(0), query.row(0))), nb = std::sqrt(dot(document.row(0), document.row(0)));
    return dot(query.row(0), document.row(0)) / std::max(na * nb, 1e-12);
  }
  double total = 0;
  for (int64_t q = 0; q < query.rows; ++q) {
    double best = -INFINITY;
    for (int64_t d = 0; d < document.rows; ++d)
      if (document.scored.empty() || document.scored[static_cast<size_t>(d)]) best = std::max(best, dot(query.row(q), document.row(d)));
    if (std::isfinite(best)) total += best;
  }
  return total;
}

}  // namespace lfm
