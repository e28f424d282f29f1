// The C API's retrievers (include/lfm/lfm.h, API level 3): lfm_embed and lfm_rerank over the
// model's Embedder (engine/embedder.h). Every input is checked and tokenized, and every limit
// checked, before the model runs, so a refused call does no work and writes nothing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <string_view>

#include "capi/capi_internal.h"

// lfm_embed's results: the inputs as they entered the model (their ids) and their vectors.
struct lfm_embeddings {
  std::vector<lfm::PreparedText> texts;
  std::vector<lfm::Embedding> vectors;
  bool normalized = false;
};

using lfm::capi::fail;
using lfm::capi::guard;
using lfm::capi::require;

namespace lfm::capi {
namespace {

// What one result may hold in memory: the vectors a call returns (rows x dim floats), together.
constexpr int64_t kMaxResultBytes = int64_t{1} << 30;
// Documents lfm_rerank embeds at a time: the memory it holds does not grow with their number.
constexpr size_t kRerankGroup = 64;

std::string str(const char* fn, const std::string& rest) { return std::string(fn) + ": " + rest; }

lfm_model_state& writable_state(lfm_model* m) {
  model_state(m);  // the NULL checks
  return *m->state;
}

Embedder& embedder_of(lfm_model_state& s, const char* fn) {
  if (!s.embedder) fail(LFM_ERR_UNSUPPORTED, str(fn, "the model cannot embed: " + s.embed_error));
  return *s.embedder;
}

InputRole role_of(int32_t t, const char* fn) {
  switch (t) {
    case LFM_INPUT_NONE: return InputRole::kPlain;
    case LFM_INPUT_QUERY: return InputRole::kQuery;
    case LFM_INPUT_DOCUMENT: return InputRole::kDocument;
  }
  fail(LFM_ERR_INVALID_ARGUMENT, str(fn, "input_type " + std::to_string(t) + " is not an lfm_input_type (0 to 2)"));
}

// The pooling a call asks for (nullopt: the model's own). A model without a retrieval head
// embeds only when the caller asks for a pooling explicitly (as lfm serve's /v1/embeddings).
std::optional<Pooling> pooling_of(int32_t p, const Embedder& e, const char* fn) {
  std::optional<Pooling> out;
  switch (p) {
    case LFM_POOLING_DEFAULT:
      if (!e.model().retrieval())
        fail(LFM_ERR_UNSUPPORTED,
             str(fn, e.model().config().architecture +
                         " is no retriever (no sentence-transformers or PyLate files): ask for a pooling (cls, mean, "
                         "last or none) to embed with its final hidden states"));
      return std::nullopt;
    case LFM_POOLING_CLS: out = Pooling::kCls; break;
    case LFM_POOLING_MEAN: out = Pooling::kMean; break;
    case LFM_POOLING_LAST: out = Pooling::kLast; break;
    case LFM_POOLING_NONE: out = Pooling::kNone; break;
    default:
      fail(LFM_ERR_INVALID_ARGUMENT, str(fn, "pooling " + std::to_string(p) + " is not an lfm_pooling (0 to 4)"));
  }
  if (e.colbert() && *out != Pooling::kNone)
    fail(LFM_ERR_INVALID_ARGUMENT, str(fn, std::string("a ColBERT model keeps one vector per token; its pooling cannot "
                                                       "be changed to ") + pooling_name(*out)));
  return out;
}

// A call's inputs: texts (with optional lengths) or token ids, `n` of them; `texts_name` and
// `ids_name` name them in errors.
struct Inputs {
  size_t n = 0;
  const char* const* texts = nullptr;
  const size_t* lengths = nullptr;
  const int32_t* const* ids = nullptr;
  const size_t* n_ids = nullptr;
  const char* texts_name;
  const char* ids_name;
};

std::string at(const char* name, size_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

// One input as it enters the model; errors name it.
PreparedText prepare_one(const Embedder& e, const Inputs& in, size_t i, InputRole role, const char* fn) {
  if (in.texts) {
    require(in.texts[i] != nullptr, str(fn, at(in.texts_name, i) + " is NULL").c_str());
    const std::string_view text(in.texts[i], in.lengths ? in.lengths[i] : std::strlen(in.texts[i]));
    PreparedText p;
    try {
      p = e.prepare(text, role);
    } catch (const Error& x) {
      fail(LFM_ERR_INVALID_ARGUMENT, str(fn, at(in.texts_name, i) + ": " + x.what()));
    }
    // An empty text with no prompt, marker or special token around it: nothing to embed.
    if (p.ids.empty())
      fail(LFM_ERR_INVALID_ARGUMENT, str(fn, at(in.texts_name, i) + " has no tokens (an empty text, and neither the "
                                                                   "model's prompts nor its tokenizer add any)"));
    return p;
  }
  const size_t n = in.n_ids[i];
  // Counted before anything is copied: a wild count is refused, not allocated.
  if (n == 0) fail(LFM_ERR_INVALID_ARGUMENT, str(fn, at(in.ids_name, i) + " holds no token ids"));
  if (n > static_cast<uint64_t>(e.max_tokens()))
    fail(LFM_ERR_INVALID_ARGUMENT, str(fn, at(in.ids_name, i) + " holds " + std::to_string(n) +
                                               " token ids, past the model's limit of " +
                                               std::to_string(e.max_tokens())));
  require(in.ids[i] != nullptr, str(fn, at(in.ids_name, i) + " is NULL").c_str());
  try {
    return e.prepare_ids(std::vector<int32_t>(in.ids[i], in.ids[i] + n), role);
  } catch (const Error& x) {
    fail(LFM_ERR_INVALID_ARGUMENT, str(fn, at(in.ids_name, i) + ": " + x.what()));
  }
}

std::vector<PreparedText> prepare_all(const lfm_model_state& s, const Embedder& e, const Inputs& in, InputRole role,
                                      const char* fn) {
  if (in.n == 0) fail(LFM_ERR_INVALID_ARGUMENT, str(fn, std::string("no inputs (") + in.texts_name + " is empty)"));
  if (in.n > LFM_EMBED_MAX_TEXTS)
    fail(LFM_ERR_INVALID_ARGUMENT, str(fn, std::to_string(in.n) + " inputs, past the limit of " +
                                               std::to_string(LFM_EMBED_MAX_TEXTS) +
                                               " per call (LFM_EMBED_MAX_TEXTS): split the call"));
  if ((in.texts != nullptr) == (in.ids != nullptr))
    fail(LFM_ERR_INVALID_ARGUMENT, str(fn, std::string("give exactly one of ") + in.texts_name + " and " + in.ids_name));
  if (in.ids) require(in.n_ids != nullptr, str(fn, std::string("the id counts of ") + in.ids_name + " are NULL").c_str());
  if (in.texts && !s.tokenizer)
    fail(LFM_ERR_UNSUPPORTED, str(fn, "the model has no tokenizer (" + s.tokenizer_error + "): give token ids"));
  std::vector<PreparedText> out;
  out.reserve(in.n);
  for (size_t i = 0; i < in.n; ++i) out.push_back(prepare_one(e, in, i, role, fn));
  return out;
}

}  // namespace
}  // namespace lfm::capi

extern "C" {

lfm_status lfm_embed_request_init(lfm_embed_request* r) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(r != nullptr, "lfm_embed_request_init: request is NULL");
    *r = lfm_embed_request{};
    r->struct_size = sizeof(*r);
  });
}

lfm_status lfm_rerank_request_init(lfm_rerank_request* r) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(r != nullptr, "lfm_rerank_request_init: request is NULL");
    *r = lfm_rerank_request{};
    r->struct_size = sizeof(*r);
  });
}

lfm_status lfm_embed(lfm_model* model, const lfm_embed_request* request, lfm_embeddings** out) {
  using namespace lfm;
  using namespace lfm::capi;
  constexpr const char* fn = "lfm_embed";
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(out != nullptr, "lfm_embed: out is NULL");
    *out = nullptr;
    lfm_model_state& s = writable_state(model);
    require(request != nullptr, "lfm_embed: request is NULL");
    lfm_embed_request defaults;
    lfm_embed_request_init(&defaults);
    const lfm_embed_request r = read_struct(request, defaults, "lfm_embed_request");
    Embedder& e = embedder_of(s, fn);
    const std::optional<Pooling> pooling = pooling_of(r.pooling, e, fn);
    const InputRole role = role_of(r.input_type, fn);
    const Inputs in{r.n_texts, r.texts, r.text_lengths, r.ids, r.n_ids, "texts", "ids"};
    auto res = std::make_unique<lfm_embeddings>();
    res->texts = prepare_all(s, e, in, role, fn);
    // The budgets of the whole call, before the model runs.
    int64_t tokens = 0, rows = 0;
    const bool per_token = pooling ? *pooling == Pooling::kNone : e.config().pooling == Pooling::kNone;
    for (const PreparedText& t : res->texts) {
      tokens += static_cast<int64_t>(t.ids.size());
      rows += per_token ? static_cast<int64_t>(t.ids.size()) : 1;
    }
    if (tokens > LFM_EMBED_MAX_TOKENS)
      capi::fail(LFM_ERR_INVALID_ARGUMENT, str(fn, std::to_string(tokens) + " tokens, past the limit of " +
                                                 std::to_string(LFM_EMBED_MAX_TOKENS) +
                                                 " per call (LFM_EMBED_MAX_TOKENS): split the call"));
    const int64_t bytes = rows * e.dim() * static_cast<int64_t>(sizeof(float));
    if (bytes > kMaxResultBytes)
      capi::fail(LFM_ERR_INVALID_ARGUMENT, str(fn, "vectors of " + std::to_string(bytes) + " bytes, past the limit of " +
                                                 std::to_string(kMaxResultBytes) + " per call: split the call"));
    {
      std::lock_guard lock(s.embed_mu);
      res->vectors = e.embed(res->texts, pooling);
    }
    res->normalized = e.config().normalize;
    *out = res.release();
  });
}

lfm_status lfm_embeddings_get(const lfm_embeddings* embeddings, size_t index, lfm_embedding* out) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(embeddings != nullptr, "lfm_embeddings_get: the handle is NULL");
    require(index < embeddings->vectors.size(),
            ("lfm_embeddings_get: index " + std::to_string(index) + " is past the " +
             std::to_string(embeddings->vectors.size()) + " results")
                .c_str());
    const lfm::Embedding& v = embeddings->vectors[index];
    const lfm::PreparedText& t = embeddings->texts[index];
    lfm_embedding e{};
    e.struct_size = sizeof(e);
    e.rows = v.rows;
    e.dim = v.dim;
    e.values = v.values.data();
    e.scored = v.scored.empty() ? nullptr : v.scored.data();
    e.ids = t.ids.data();
    e.n_ids = t.ids.size();
    e.input_tokens = t.input_tokens;
    e.truncated = t.truncated;
    e.normalized = embeddings->normalized;
    lfm::capi::write_struct(out, e, "lfm_embedding");
  });
}

lfm_status lfm_embeddings_free(lfm_embeddings* embeddings) {
  delete embeddings;
  return LFM_OK;
}

lfm_status lfm_rerank(lfm_model* model, const lfm_rerank_request* request, double* scores, size_t* order) {
  using namespace lfm;
  using namespace lfm::capi;
  constexpr const char* fn = "lfm_rerank";
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    lfm_model_state& s = writable_state(model);
    require(request != nullptr, "lfm_rerank: request is NULL");
    require(scores != nullptr, "lfm_rerank: scores is NULL");
    lfm_rerank_request defaults;
    lfm_rerank_request_init(&defaults);
    const lfm_rerank_request r = read_struct(request, defaults, "lfm_rerank_request");
    Embedder& e = embedder_of(s, fn);
    if (!e.model().retrieval())
      capi::fail(LFM_ERR_UNSUPPORTED, str(fn, e.model().config().architecture +
                                            " is no retriever (no sentence-transformers or PyLate files): it has no "
                                            "relevance score"));
    const Inputs query{1, r.query ? &r.query : nullptr, nullptr, r.query_ids ? &r.query_ids : nullptr,
                       &r.n_query_ids, "query", "query_ids"};
    const Inputs docs{r.n_documents, r.documents, r.document_lengths, r.document_ids, r.n_document_ids, "documents",
                      "document_ids"};
    const std::vector<PreparedText> q = prepare_all(s, e, query, InputRole::kQuery, fn);
    const std::vector<PreparedText> d = prepare_all(s, e, docs, InputRole::kDocument, fn);
    std::vector<double> out(d.size());
    Embedding qv;
    for (size_t begin = 0; begin < d.size(); begin += kRerankGroup) {
      const size_t n = std::min(kRerankGroup, d.size() - begin);
      std::lock_guard lock(s.embed_mu);  // per group: other calls on the model interleave
      if (begin == 0) qv = std::move(e.embed(q)[0]);
      const std::vector<Embedding> dv = e.embed(std::span<const PreparedText>(d).subspan(begin, n));
      for (size_t i = 0; i < n; ++i) out[begin + i] = Embedder::score(qv, dv[i]);
    }
    std::copy(out.begin(), out.end(), scores);
    if (order) {
      std::vector<size_t> idx(out.size());
      std::iota(idx.begin(), idx.end(), size_t{0});
      // NaN (a broken checkpoint) ranks last rather than breaking the sort's ordering.
      auto key = [&](size_t i) { return std::isnan(out[i]) ? -INFINITY : out[i]; };
      std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return key(a) > key(b); });
      std::copy(idx.begin(), idx.end(), order);
    }
  });
}

}  // extern "C"
