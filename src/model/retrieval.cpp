#include "model/retrieval.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "core/limits.h"
#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "kernels/weight_pack.h"

namespace lfm {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kCls: return "cls";
    case Pooling::kMean: return "mean";
    case Pooling::kLast: return "last";
    case Pooling::kNone: return "none";
  }
  return "?";
}

Pooling parse_pooling(const std::string& name) {
  for (Pooling p : {Pooling::kCls, Pooling::kMean, Pooling::kLast, Pooling::kNone})
    if (name == pooling_name(p)) return p;
  fail("pooling: '", name, "' is not one of cls, mean, last, none");
}

namespace {

json read_json_file(const fs::path& path) {
  return parse_json(read_text_file(path.string(), "retriever:"), cat("retriever: '", path.string(), "'"));
}

// A value of the expected JSON type, or `fallback` when the key is absent or null.
template <typename T>
T value_of(const json& j, const char* key, T fallback, const fs::path& file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    fail("retriever: '", file.string(), "': '", key, "' has the wrong type (", it->type_name(), ")");
  }
}

int64_t length_of(const json& j, const char* key, const fs::path& file) {
  const int64_t n = value_of<int64_t>(j, key, 0, file);
  LFM_CHECK(n >= 0 && n <= limits::kMaxPositions, "retriever: '", file.string(), "': '", key, "' = ", n,
            " is outside [0, ", limits::kMaxPositions, "]");
  return n;
}

// 1_Pooling/config.json: exactly one of the modes lfm implements.
Pooling read_pooling(const fs::path& file) {
  const json j = read_json_file(file);
  LFM_CHECK(j.is_object(), "retriever: '", file.string(), "' is not a JSON object");
  for (const char* unsupported : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                  "pooling_mode_weightedmean_tokens"})
    LFM_CHECK(!value_of<bool>(j, unsupported, false, file), "retriever: '", file.string(), "' asks for ", unsupported,
              ", which lfm does not implement (cls, mean and last token pooling are)");
  std::vector<Pooling> modes;
  if (value_of<bool>(j, "pooling_mode_cls_token", false, file)) modes.push_back(Pooling::kCls);
  if (value_of<bool>(j, "pooling_mode_mean_tokens", false, file)) modes.push_back(Pooling::kMean);
  if (value_of<bool>(j, "pooling_mode_lasttoken", false, file)) modes.push_back(Pooling::kLast);
  LFM_CHECK(modes.size() == 1, "retriever: '", file.string(), "' sets ", modes.size(),
            " pooling modes; lfm needs exactly one (concatenated modes are not supported)");
  return modes[0];
}

// A Dense module's config: bias-free, identity activation (what the ColBERT models use).
int64_t read_dense(const fs::path& dir, int64_t hidden_size) {
  const fs::path file = dir / "config.json";
  const json j = read_json_file(file);
  LFM_CHECK(j.is_object(), "retriever: '", file.string(), "' is not a JSON object");
  const int64_t in = value_of<int64_t>(j, "in_features", 0, file), out = value_of<int64_t>(j, "out_features", 0, file);
  LFM_CHECK(in == hidden_size, "retriever: '", file.string(), "': in_features ", in, " differs from the model's ",
            hidden_size);
  LFM_CHECK(out > 0 && out <= limits::kMaxHiddenSize, "retriever: '", file.string(), "': out_features ", out,
            " is outside [1, ", limits::kMaxHiddenSize, "]");
  LFM_CHECK(!value_of<bool>(j, "bias", false, file), "retriever: '", file.string(),
            "': a Dense projection with a bias is not supported");
  const std::string act = value_of<std::string>(j, "activation_function", "torch.nn.modules.linear.Identity", file);
  LFM_CHECK(act.ends_with("Identity"), "retriever: '", file.string(), "': activation '", act,
            "' is not supported (only Identity)");
  return out;
}

}  // namespace

std::optional<RetrievalConfig> read_retrieval_config(const std::string& folder, int64_t hidden_size) {
  const fs::path root(folder), modules_file = root / "modules.json";
  if (!fs::exists(modules_file)) return std::nullopt;
  const json modules = read_json_file(modules_file);
  LFM_CHECK(modules.is_array(), "retriever: '", modules_file.string(), "' is not a JSON array");
  RetrievalConfig c;
  c.normalize = false;
  bool pooled = false;
  for (const json& m : modules) {
    LFM_CHECK(m.is_object(), "retriever: '", modules_file.string(), "' has an entry that is not an object");
    const std::string type = value_of<std::string>(m, "type", "", modules_file);
    const std::string path = value_of<std::string>(m, "path", "", modules_file);
    LFM_CHECK(path.find("..") == std::string::npos && !fs::path(path).is_absolute(), "retriever: '",
              modules_file.string(), "': module path '", path, "' leaves the folder");
    if (type.ends_with("models.Transformer")) continue;
    if (type.ends_with("models.Pooling")) {
      c.pooling = read_pooling(root / path / "config.json");
      pooled = true;
    } else if (type.ends_with("models.Normalize")) {
      c.normalize = true;
    } else if (type.ends_with("models.Dense") || type.ends_with("models.Dense.Dense")) {
      LFM_CHECK(c.dense_out == 0, "retriever: '", modules_file.string(), "' has more than one Dense module");
      c.dense_out = read_dense(root / path, hidden_size);
      if (type.starts_with("pylate.")) c.kind = RetrievalConfig::Kind::kColbert;
    } else {
      fail("retriever: '", modules_file.string(), "': module type '", type, "' is not supported");
    }
  }
  if (const fs::path st = root / "config_sentence_transformers.json"; fs::exists(st)) {
    const json j = read_json_file(st);
    LFM_CHECK(j.is_object(), "retriever: '", st.string(), "' is not a JSON object");
    if (const auto it = j.find("prompts"); it != j.end() && it->is_object()) {
      c.query_prompt = value_of<std::string>(*it, "query", "", st);
      c.document_prompt = value_of<std::string>(*it, "document", "", st);
    }
    if (j.contains("query_prefix") || j.contains("document_prefix") || j.contains("query_length"))
      c.kind = RetrievalConfig::Kind::kColbert;
    c.query_prefix = value_of<std::string>(j, "query_prefix", "", st);
    c.document_prefix = value_of<std::string>(j, "document_prefix", "", st);
    c.query_length = length_of(j, "query_length", st);
    c.document_length = length_of(j, "document_length", st);
    c.do_query_expansion = value_of<bool>(j, "do_query_expansion", true, st);
    c.attend_to_expansion_tokens = value_of<bool>(j, "attend_to_expansion_tokens", false, st);
    c.skiplist_words = value_of<std::vector<std::string>>(j, "skiplist_words", {}, st);
  }
  if (const fs::path sb = root / "sentence_bert_config.json"; fs::exists(sb)) {
    const json j = read_json_file(sb);
    LFM_CHECK(j.is_object(), "retriever: '", sb.string(), "' is not a JSON object");
    c.max_tokens = length_of(j, "max_seq_length", sb);
  }
  if (c.colbert()) {
    LFM_CHECK(c.dense_out > 0, "retriever: '", folder, "' is a PyLate ColBERT model without its Dense module");
    c.pooling = Pooling::kNone;
    c.normalize = true;  // PyLate normalises every token's vector
  } else {
    LFM_CHECK(pooled, "retriever: '", modules_file.string(), "' has no Pooling module");
  }
  return c;
}

RetrievalHead::RetrievalHead(RetrievalConfig cfg, std::shared_ptr<const TensorSource> dense, int64_t hidden_size,
                             Backend* backend)
    : cfg_(std::move(cfg)), dense_src_(std::move(dense)) {
  if (!dense_src_) return;
  const TensorView* t = dense_src_->find("linear.weight");
  LFM_CHECK(t, "retriever: ", dense_src_->origin(), " has no 'linear.weight'");
  LFM_CHECK(t->shape.size() == 2 && t->shape[0] == cfg_.dense_out && t->shape[1] == hidden_size, "retriever: ",
            dense_src_->origin(), ": 'linear.weight' is ", shape_str(t->shape), ", not [", cfg_.dense_out, ", ",
            hidden_size, "]");
  LFM_CHECK(dense_src_->names().size() == 1, "retriever: ", dense_src_->origin(), " holds ",
            dense_src_->names().size(), " tensors; a Dense module holds only 'linear.weight'");
  dense_ = *t;
  WeightSet set;
  set.matrices.push_back(&dense_);
  prepared_ = backend ? backend->prepare_weights(set) : prepare_cpu_weights(set);
}

std::shared_ptr<const TensorSource> open_dense_module(const std::string& folder) {
  const fs::path modules_file = fs::path(folder) / "modules.json";
  if (!fs::exists(modules_file)) return nullptr;
  const json modules = read_json_file(modules_file);
  LFM_CHECK(modules.is_array(), "retriever: '", modules_file.string(), "' is not a JSON array");
  std::shared_ptr<const TensorSource> dense;
  for (const json& m : modules) {
    if (!m.is_object()) continue;  // read_retrieval_config names it
    const std::string type = m.value("type", "");
    if (!type.ends_with("models.Dense") && !type.ends_with("models.Dense.Dense")) continue;
    const fs::path dir = fs::path(folder) / m.value("path", "");
    LFM_CHECK(fs::exists(dir / "model.safetensors"), "retriever: '", dir.string(),
              "' has no model.safetensors (a pytorch_model.bin Dense module is not read: save it as safetensors)");
    dense = std::make_shared<SafetensorsCheckpoint>(dir.string());
  }
  return dense;
}

std::shared_ptr<const RetrievalHead> load_retrieval_head(const std::string& folder, int64_t hidden_size,
                                                         Backend* backend) {
  auto cfg = read_retrieval_config(folder, hidden_size);
  if (!cfg) return nullptr;
  std::shared_ptr<const TensorSource> dense = cfg->dense_out > 0 ? open_dense_module(folder) : nullptr;
  return std::make_shared<RetrievalHead>(std::move(*cfg), std::move(dense), hidden_size, backend);
}

}  // namespace lfm
