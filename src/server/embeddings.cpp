// POST /v1/embeddings (OpenAI's shape) and POST /v1/rerank, /rerank (the shape llama-server,
// Jina and Cohere use) on the embedding service (engine/embedding_service.h): requests are
// validated whole, then their texts join the service's queue and share encoder passes with
// other requests'.
#include <algorithm>
#include <numeric>

#include "core/base64.h"
#include "server/server_impl.h"

namespace lfm::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// "input_type" (our extension; also "query" / "document" as Cohere and Jina name them).
InputRole role_of(const ojson& body, InputRole fallback) {
  const auto it = body.find("input_type");
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw ApiError(400, "'input_type' must be \"query\", \"document\" or \"none\"", "input_type");
  std::string v = it->get<std::string>();
  if (v == "search_query") v = "query";
  if (v == "search_document" || v == "passage") v = "document";
  try {
    return parse_input_role(v);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "input_type");
  }
}

// A token-id array of the request, checked.
std::vector<int32_t> ids_of(const ojson& a, const std::string& where, int64_t vocab) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const auto& t : a) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      throw ApiError(400, where + " must hold token ids in [0, " + std::to_string(vocab) + ")", "input");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

// A text's vector, or its token vectors as PyLate's encode returns them: a document's rows that
// are not scored (skiplist) are left out, as an index would store it.
json vector_json(const Embedding& e, bool base64) {
  if (e.rows == 1 && e.scored.empty())
    return base64 ? json(encode_base64(e.values.data(), e.values.size() * sizeof(float))) : json(e.values);
  std::vector<float> kept;
  json rows = json::array();
  for (int64_t r = 0; r < e.rows; ++r) {
    if (!e.scored.empty() && !e.scored[static_cast<size_t>(r)]) continue;
    if (base64)
      kept.insert(kept.end(), e.row(r), e.row(r) + e.dim);
    else
      rows.push_back(std::vector<float>(e.row(r), e.row(r) + e.dim));
  }
  return base64 ? json(encode_base64(kept.data(), kept.size() * sizeof(float))) : rows;
}

}  // namespace

std::vector<Embedding> Server::Impl::wait_embeddings(const std::shared_ptr<EmbeddingService::Call>& call) {
  for (;;) {
    if (auto out = call->wait_for(std::chrono::milliseconds(50))) return std::move(*out);
    if (http.client_gone() || draining.load()) {
      call->cancel();
      throw ApiError(503, draining.load() ? "the server is shutting down" : "the client went away");
    }
  }
}

void Server::Impl::handle_embeddings(const httplib::Request& req, httplib::Response& res) {
  EmbeddingService& service = embeddings();
  const Embedder& emb = service.embedder();
  const auto body = parse_json_body(req);
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_model(body);
  const InputRole role = role_of(body, InputRole::kPlain);
  const std::string format = body.contains("encoding_format") && body["encoding_format"].is_string()
                                 ? body["encoding_format"].get<std::string>()
                                 : body.contains("encoding_format") && !body["encoding_format"].is_null() ? "?" : "float";
  if (format != "float" && format != "base64")
    throw ApiError(400, "'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
  std::optional<Pooling> pooling;
  if (const auto it = body.find("pooling"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) throw ApiError(400, "'pooling' must be a string", "pooling");
    try {
      pooling = parse_pooling(it->get<std::string>());
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "pooling");
    }
    if (emb.colbert() && *pooling != Pooling::kNone)
      throw ApiError(400, std::string("a ColBERT model keeps one vector per token; its pooling cannot be changed to ") +
                              pooling_name(*pooling),
                     "pooling");
  }
  if (const auto it = body.find("dimensions"); it != body.end() && !it->is_null())
    if (!it->is_number_integer() || it->get<int64_t>() != emb.dim())
      throw ApiError(400, "'dimensions' must be " + std::to_string(emb.dim()) + ": the model's vectors cannot be shortened",
                     "dimensions");

  // input: a string, an array of strings, an array of token ids, or an array of such arrays.
  const auto it = body.find("input");
  if (it == body.end() || it->is_null()) throw ApiError(400, "'input' is required", "input");
  const ojson& input = *it;
  const int64_t vocab = emb.model().config().vocab_size;
  std::vector<PreparedText> texts;
  auto add_text = [&](const ojson& v, const std::string& where) {
    if (v.is_string()) {
      if (!tok_) throw ApiError(400, "the model has no tokenizer: send token ids", "input");
      try {
        texts.push_back(emb.prepare(v.get<std::string>(), role));
      } catch (const Error& e) {
        throw ApiError(400, where + ": " + e.what(), "input");
      }
    } else if (v.is_array()) {
      try {
        texts.push_back(emb.prepare_ids(ids_of(v, where, vocab), role));
      } catch (const Error& e) {
        throw ApiError(400, where + ": " + e.what(), "input");
      }
    } else {
      throw ApiError(400, where + " must be a string or an array of token ids", "input");
    }
  };
  if (input.is_string()) {
    add_text(input, "'input'");
  } else if (input.is_array() && !input.empty() && input[0].is_number_integer()) {
    add_text(input, "'input'");
  } else if (input.is_array()) {
    if (input.empty()) throw ApiError(400, "'input' must not be empty", "input");
    const int64_t most = service.options().max_texts_per_call;
    if (static_cast<int64_t>(input.size()) > most)
      throw ApiError(400, "'input' holds " + std::to_string(input.size()) + " items, past the limit of " +
                              std::to_string(most) + " per call", "input");
    for (size_t i = 0; i < input.size(); ++i) add_text(input[i], "'input[" + std::to_string(i) + "]'");
  } else {
    throw ApiError(400, "'input' must be a string, an array of strings or token ids", "input");
  }

  int64_t tokens = 0;
  for (const PreparedText& t : texts) tokens += t.input_tokens;
  std::shared_ptr<EmbeddingService::Call> call;
  try {
    call = service.submit(std::move(texts), pooling);
  } catch (const EngineBusy&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "input");
  }
  const std::vector<Embedding> out = wait_embeddings(call);
  json data = json::array();
  for (size_t i = 0; i < out.size(); ++i)
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", vector_json(out[i], format == "base64")}});
  note_usage(tokens, 0);
  res.set_content(json{{"object", "list"},
                       {"data", std::move(data)},
                       {"model", opt.model_name},
                       {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}
                      .dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

void Server::Impl::handle_rerank(const httplib::Request& req, httplib::Response& res) {
  EmbeddingService& service = embeddings();
  const Embedder& emb = service.embedder();
  const auto body = parse_json_body(req);
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_model(body);
  if (!tok_) throw ApiError(400, "the model has no tokenizer: /v1/rerank needs one", "query");
  const auto q = body.find("query");
  if (q == body.end() || !q->is_string()) throw ApiError(400, "'query' must be a string", "query");
  const auto d = body.find("documents");
  if (d == body.end() || !d->is_array()) throw ApiError(400, "'documents' must be an array", "documents");
  if (d->empty()) throw ApiError(400, "'documents' must not be empty", "documents");
  if (static_cast<int64_t>(d->size()) > opt.max_rerank_documents)
    throw ApiError(400, "'documents' holds " + std::to_string(d->size()) + " documents, past the limit of " +
                            std::to_string(opt.max_rerank_documents) + " per call",
                   "documents");
  int64_t top_n = static_cast<int64_t>(d->size());
  if (const auto it = body.find("top_n"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1) throw ApiError(400, "'top_n' must be a positive integer", "top_n");
    top_n = std::min(top_n, it->get<int64_t>());
  }
  bool return_documents = false;
  if (const auto it = body.find("return_documents"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) throw ApiError(400, "'return_documents' must be a boolean", "return_documents");
    return_documents = it->get<bool>();
  }
  std::vector<std::string> docs;
  for (size_t i = 0; i < d->size(); ++i) {
    const ojson& v = (*d)[i];
    const ojson* text = v.is_string() ? &v : v.is_object() && v.contains("text") ? &v["text"] : nullptr;
    if (!text || !text->is_string())
      throw ApiError(400, "'documents[" + std::to_string(i) + "]' must be a string or {\"text\": string}", "documents");
    docs.push_back(text->get<std::string>());
  }
  // Every text is prepared (and so checked) before any is encoded.
  PreparedText query;
  std::vector<PreparedText> prepared;
  int64_t tokens = 0;
  try {
    query = emb.prepare(q->get<std::string>(), InputRole::kQuery);
  } catch (const Error& e) {
    throw ApiError(400, std::string("'query': ") + e.what(), "query");
  }
  for (size_t i = 0; i < docs.size(); ++i) {
    try {
      prepared.push_back(emb.prepare(docs[i], InputRole::kDocument));
    } catch (const Error& e) {
      throw ApiError(400, "'documents[" + std::to_string(i) + "]': " + e.what(), "documents");
    }
  }
  tokens += query.input_tokens;
  for (const PreparedText& t : prepared) tokens += t.input_tokens;
  auto submit = [&](std::vector<PreparedText> texts) {
    try {
      return service.submit(std::move(texts));
    } catch (const EngineBusy&) {
      throw;
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "documents");
    }
  };
  // The query, then the documents in chunks scored as they come back: a call's memory holds one
  // chunk's vectors (a ColBERT document keeps one per token), whatever the number of documents.
  const Embedding query_vectors = wait_embeddings(submit({std::move(query)}))[0];
  constexpr size_t kChunk = 64;
  std::vector<double> scores;
  for (size_t begin = 0; begin < prepared.size(); begin += kChunk) {
    const size_t end = std::min(prepared.size(), begin + kChunk);
    std::vector<PreparedText> chunk(std::make_move_iterator(prepared.begin() + static_cast<std::ptrdiff_t>(begin)),
                                    std::make_move_iterator(prepared.begin() + static_cast<std::ptrdiff_t>(end)));
    for (const Embedding& d : wait_embeddings(submit(std::move(chunk)))) scores.push_back(Embedder::score(query_vectors, d));
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  json results = json::array();
  for (int64_t r = 0; r < top_n; ++r) {
    const size_t i = order[static_cast<size_t>(r)];
    json item = {{"index", i}, {"relevance_score", scores[i]}};
    if (return_documents) item["document"] = {{"text", docs[i]}};
    results.push_back(std::move(item));
  }
  note_usage(tokens, 0);
  res.set_content(json{{"object", "list"},
                       {"model", opt.model_name},
                       {"results", std::move(results)},
                       {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}
                      .dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

}  // namespace lfm::server
