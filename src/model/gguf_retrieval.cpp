#include "model/gguf_retrieval.h"

#include <cstring>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/limits.h"

namespace lfm::gguf {

namespace {

// llama.cpp's enum llama_pooling_type, as <arch>.pooling_type stores it.
constexpr int64_t kPoolNone = 0, kPoolMean = 1, kPoolCls = 2, kPoolLast = 3, kPoolRank = 4;

Pooling pooling_from_llama(int64_t v, const std::string& key, const std::string& path) {
  switch (v) {
    case kPoolNone: return Pooling::kNone;
    case kPoolMean: return Pooling::kMean;
    case kPoolCls: return Pooling::kCls;
    case kPoolLast: return Pooling::kLast;
    case kPoolRank:
      fail("gguf: '", path, "': ", key, " = 4 (RANK, a reranker's classification head) is not supported by lfm");
    default:
      fail("gguf: '", path, "': ", key, " = ", v, " is not a llama.cpp pooling type (0 none, 1 mean, 2 cls, 3 last, 4 rank)");
  }
}

int64_t pooling_to_llama(Pooling p) {
  switch (p) {
    case Pooling::kNone: return kPoolNone;
    case Pooling::kMean: return kPoolMean;
    case Pooling::kCls: return kPoolCls;
    case Pooling::kLast: return kPoolLast;
  }
  return kPoolNone;
}

class Keys {
 public:
  Keys(const GgufFile& f, const std::string& arch) : f_(f), prefix_(arch + ".retrieval.") {}
  const Value* get(const std::string& name) const { return f_.find(prefix_ + name); }
  std::string key(const std::string& name) const { return prefix_ + name; }
  std::string str(const std::string& name, std::string fallback) const {
    const Value* v = get(name);
    return v ? v->as_string(key(name)) : fallback;
  }
  bool flag(const std::string& name, bool fallback) const {
    const Value* v = get(name);
    return v ? v->as_bool(key(name)) : fallback;
  }
  int64_t length(const std::string& name, int64_t fallback) const {
    const Value* v = get(name);
    if (!v) return fallback;
    const int64_t n = v->as_int(key(name));
    LFM_CHECK(n >= 0 && n <= limits::kMaxPositions, "gguf: '", f_.path(), "': ", key(name), " = ", n,
              " is outside [0, ", limits::kMaxPositions, "]");
    return n;
  }
  std::vector<std::string> words(const std::string& name, std::vector<std::string> fallback) const {
    const Value* v = get(name);
    if (!v) return fallback;
    std::vector<std::string> out;
    for (const Value& w : v->as_array(key(name))) out.push_back(w.as_string(key(name)));
    return out;
  }

 private:
  const GgufFile& f_;
  std::string prefix_;
};

// PyLate's defaults for keys its config may lack (pylate/models/colbert.py): what a ColBERT file
// written by llama.cpp's converter, which carries none of them, is read with.
std::vector<std::string> punctuation_words() {
  std::vector<std::string> out;
  for (char c : std::string("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")) out.emplace_back(1, c);
  return out;
}

// The Dense weights are copied out of the mapping: a Model lets go of its file once its own
// weights are prepared (Model::detach_from_files keeps only what the backbone still reads), which
// would leave a view into the file reading zeros. The copy is small (out × d, 512 KiB at F32 for
// the 350M models) and the file's pages for it are dropped with the rest.
class DenseSource : public MapTensorSource {
 public:
  DenseSource(const GgufFile& file, const TensorInfo& t) : bytes_(t.nbytes) {
    origin_ = "'" + file.path() + "' (" + kDenseTensor + ")";
    std::memcpy(bytes_.data(), t.data, t.nbytes);
    tensors_.emplace("linear.weight", TensorView{t.dtype, std::vector<int64_t>(t.ne.rbegin(), t.ne.rend()),
                                                 static_cast<const uint8_t*>(bytes_.data()), t.nbytes});
  }

 private:
  AlignedBuffer bytes_;
};

}  // namespace

bool gguf_is_retriever(const GgufFile& f, const std::string& arch) {
  if (arch == "lfm2-bidir") return true;  // only the retrievers use that architecture name
  if (f.find(arch + ".pooling_type") || f.find(arch + ".retrieval.kind") || f.find_tensor(kDenseTensor) ||
      f.find(arch + ".embedding_length_out"))
    return true;
  const Value* causal = f.find(arch + ".attention.causal");
  return causal && !causal->as_bool(arch + ".attention.causal");
}

std::optional<RetrievalConfig> retrieval_config_from_gguf(const GgufFile& f, const ModelConfig& cfg) {
  const Value* av = f.find("general.architecture");
  LFM_CHECK(av, "gguf: '", f.path(), "' lacks general.architecture");
  const std::string arch = av->as_string("general.architecture");
  const Keys k(f, arch);
  const std::string pool_key = arch + ".pooling_type", out_key = arch + ".embedding_length_out";
  const Value* pool = f.find(pool_key);
  const Value* out = f.find(out_key);
  const TensorInfo* dense = f.find_tensor(kDenseTensor);
  LFM_CHECK(!f.find_tensor(kDenseBias), "gguf: '", f.path(), "': tensor '", kDenseBias,
            "': a Dense projection with a bias is not supported");
  if (!k.get("kind") && !pool && !dense && !out) return std::nullopt;

  RetrievalConfig r;
  if (dense) {
    LFM_CHECK(out, "gguf: '", f.path(), "' has tensor '", kDenseTensor, "' but lacks ", out_key, " (its output width)");
    r.dense_out = out->as_int(out_key);
    LFM_CHECK(r.dense_out > 0 && r.dense_out <= limits::kMaxHiddenSize, "gguf: '", f.path(), "': ", out_key, " = ",
              r.dense_out, " is outside [1, ", limits::kMaxHiddenSize, "]");
    LFM_CHECK(dense->ne.size() == 2 && dense->ne[0] == cfg.hidden_size && dense->ne[1] == r.dense_out, "gguf: '",
              f.path(), "': tensor '", kDenseTensor, "' has ggml dims ", shape_str(dense->ne), ", expected [",
              cfg.hidden_size, ", ", r.dense_out, "] (", arch, ".embedding_length ", cfg.hidden_size, ", ", out_key, " ", r.dense_out,
              ")");
  } else {
    LFM_CHECK(!out, "gguf: '", f.path(), "' sets ", out_key, " = ", out->as_int(out_key), " but has no tensor '",
              kDenseTensor, "'");
  }

  const std::string kind = k.str("kind", dense ? "colbert" : "embedding");
  LFM_CHECK(kind == "embedding" || kind == "colbert", "gguf: '", f.path(), "': ", k.key("kind"), " = '", kind,
            "' (lfm knows 'embedding' and 'colbert')");
  r.kind = kind == "colbert" ? RetrievalConfig::Kind::kColbert : RetrievalConfig::Kind::kEmbedding;
  if (r.colbert()) {
    LFM_CHECK(dense, "gguf: '", f.path(), "': ", k.key("kind"), " is 'colbert' but the file has no tensor '",
              kDenseTensor, "'");
    LFM_CHECK(!pool || pool->as_int(pool_key) == kPoolNone, "gguf: '", f.path(), "': ", pool_key, " = ",
              pool->as_int(pool_key), " for a ColBERT model, which keeps one vector per token (0, none)");
    r.pooling = Pooling::kNone;
    r.normalize = true;  // PyLate normalises every token's vector
    r.query_prefix = k.str("query_prefix", "[Q] ");
    r.document_prefix = k.str("document_prefix", "[D] ");
    r.query_length = k.length("query_length", 32);
    r.document_length = k.length("document_length", 180);
    r.do_query_expansion = k.flag("do_query_expansion", true);
    r.attend_to_expansion_tokens = k.flag("attend_to_expansion_tokens", false);
    r.skiplist_words = k.words("skiplist_words", punctuation_words());
  } else {
    LFM_CHECK(!dense, "gguf: '", f.path(), "': tensor '", kDenseTensor,
              "' on a pooled embedding model (a Dense after pooling) is not supported");
    LFM_CHECK(pool, "gguf: '", f.path(), "': an embedding model without ", pool_key);
    r.pooling = pooling_from_llama(pool->as_int(pool_key), pool_key, f.path());
    r.normalize = k.flag("normalize", false);  // sentence-transformers: only with a Normalize module
    r.query_prompt = k.str("query_prompt", "");
    r.document_prompt = k.str("document_prompt", "");
  }
  r.max_tokens = k.length("max_tokens", 0);
  return r;
}

std::shared_ptr<const TensorSource> gguf_dense_source(const GgufFile& file) {
  const TensorInfo* t = file.find_tensor(kDenseTensor);
  if (!t) return nullptr;
  return std::make_shared<DenseSource>(file, *t);
}

std::vector<std::pair<std::string, Value>> retrieval_metadata(const RetrievalConfig& r, const std::string& arch) {
  std::vector<std::pair<std::string, Value>> kv;
  const std::string p = arch + ".retrieval.";
  auto u32 = [](int64_t v) {
    LFM_CHECK(v >= 0 && v <= 0xffffffffLL, "convert: retrieval value ", v, " does not fit a u32 metadata entry");
    return Value::of_u32(static_cast<uint32_t>(v));
  };
  // llama.cpp's own keys: a pooled model's pooling type, the Dense width (with the tensor).
  if (!r.colbert()) kv.emplace_back(arch + ".pooling_type", u32(pooling_to_llama(r.pooling)));
  if (r.dense_out > 0) kv.emplace_back(arch + ".embedding_length_out", u32(r.dense_out));
  kv.emplace_back(p + "kind", Value::of_string(r.colbert() ? "colbert" : "embedding"));
  kv.emplace_back(p + "normalize", Value::of_bool(r.normalize));
  kv.emplace_back(p + "max_tokens", u32(r.max_tokens));
  if (!r.colbert()) {
    kv.emplace_back(p + "query_prompt", Value::of_string(r.query_prompt));
    kv.emplace_back(p + "document_prompt", Value::of_string(r.document_prompt));
    return kv;
  }
  kv.emplace_back(p + "query_prefix", Value::of_string(r.query_prefix));
  kv.emplace_back(p + "document_prefix", Value::of_string(r.document_prefix));
  kv.emplace_back(p + "query_length", u32(r.query_length));
  kv.emplace_back(p + "document_length", u32(r.document_length));
  kv.emplace_back(p + "do_query_expansion", Value::of_bool(r.do_query_expansion));
  kv.emplace_back(p + "attend_to_expansion_tokens", Value::of_bool(r.attend_to_expansion_tokens));
  std::vector<Value> words;
  for (const std::string& w : r.skiplist_words) words.push_back(Value::of_string(w));
  kv.emplace_back(p + "skiplist_words", Value::of_array(ValueType::STRING, std::move(words)));
  return kv;
}

}  // namespace lfm::gguf
