// SpeechOutModel: the speech output head's config and weights (model/speech_out.h). The depth
// transformer's steps: model/depth_decoder.cpp.
#include "model/speech_out.h"

#include <cmath>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/dequant.h"
#include "kernels/weight_pack.h"
#include "model/speech_out_weights.h"

namespace lfm {

namespace {

int64_t get_int(const nlohmann::json& j, const char* key, int64_t dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  LFM_CHECK(j[key].is_number_integer(), "config: '", key, "' must be an integer, got ", j[key].dump());
  return j[key].get<int64_t>();
}

double get_num(const nlohmann::json& j, const char* key, double dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  LFM_CHECK(j[key].is_number(), "config: '", key, "' must be a number, got ", j[key].dump());
  return j[key].get<double>();
}

}  // namespace

SpeechOutConfig parse_speech_out_config(const nlohmann::json& j, int64_t text_hidden) {
  SpeechOutConfig c;
  c.codebooks = get_int(j, "codebooks", 8);
  c.audio_vocab = get_int(j, "audio_vocab_size", 2049);
  c.audio_eos = static_cast<int32_t>(get_int(j, "audio_eos_token_id", c.audio_vocab - 1));
  c.audio_start_id = static_cast<int32_t>(get_int(j, "audio_start_token_id", 128));
  c.text_end_id = static_cast<int32_t>(get_int(j, "text_end_token_id", 130));
  c.interleaved_text = get_int(j, "interleaved_n_text", 6);
  c.interleaved_audio = get_int(j, "interleaved_n_audio", 12);
  c.text_hidden = text_hidden;
  const nlohmann::json d = j.contains("depthformer") && j["depthformer"].is_object() ? j["depthformer"]
                                                                                    : nlohmann::json::object();
  c.layers = get_int(d, "layers", 6);
  c.dim = get_int(d, "dim", 1024);
  c.heads = get_int(d, "num_attention_heads", 32);
  c.kv_heads = get_int(d, "num_key_value_heads", 8);
  c.norm_eps = get_num(d, "norm_eps", 1e-5);
  c.rope_theta = get_num(d, "rope_theta", 1e6);
  c.tie = !d.contains("tie") || d["tie"].is_null() || d["tie"].get<bool>();
  const int64_t multiple = get_int(d, "multiple_of", 256);
  c.ffn = get_int(d, "intermediate_size", 0);
  if (c.ffn <= 0) {  // the depthformer config's SwiGLU rule: 2/3 of 4·dim, rounded up to `multiple_of`
    LFM_CHECK(multiple > 0, "config: depthformer.multiple_of ", multiple, " must be positive");
    const int64_t swiglu = static_cast<int64_t>(2.0 * (4 * c.dim) / 3.0);
    c.ffn = multiple * ((swiglu + multiple - 1) / multiple);
  }
  LFM_CHECK(c.codebooks > 0 && c.codebooks <= 64, "config: codebooks ", c.codebooks, " is not in [1, 64]");
  LFM_CHECK(c.audio_vocab > 1 && c.audio_eos >= 0 && c.audio_eos < c.audio_vocab, "config: audio_eos_token_id ",
            c.audio_eos, " is outside the audio vocabulary of ", c.audio_vocab);
  LFM_CHECK(c.interleaved_text > 0 && c.interleaved_audio > 0, "config: interleaved_n_text ", c.interleaved_text,
            " and interleaved_n_audio ", c.interleaved_audio, " must be positive");
  LFM_CHECK(c.layers > 0 && c.dim > 0 && c.heads > 0 && c.kv_heads > 0 && c.dim % c.heads == 0 &&
                c.heads % c.kv_heads == 0 && c.head_dim() % 2 == 0,
            "config: depthformer dim ", c.dim, " with ", c.heads, " heads and ", c.kv_heads,
            " key/value heads does not split into even heads");
  LFM_CHECK(c.norm_eps > 0 && c.rope_theta > 0, "config: depthformer norm_eps ", c.norm_eps, " and rope_theta ",
            c.rope_theta, " must be positive");
  return c;
}

bool is_speech_out_tensor(const std::string& name) {
  const std::string s = name.rfind("model.", 0) == 0 ? name.substr(6) : name;
  for (const char* p : {"audio_embedding.", "depthformer.", "depth_linear.", "depth_embeddings."})
    if (s.rfind(p, 0) == 0) return true;
  return false;
}

namespace {

class Binder {
 public:
  Binder(const TensorSource& src, std::vector<std::vector<uint8_t>>& owned) : src_(src), owned_(owned) {}
  const TensorView* find(const std::string& n) const {
    if (const TensorView* v = src_.find("model." + n)) return v;
    return src_.find(n);
  }
  TensorView view(const std::string& n, int64_t rows, int64_t cols) {
    const TensorView* v = find(n);
    LFM_CHECK(v, "speech output weights: missing tensor '", n, "' (expected [", rows, ", ", cols, "]) in ",
              src_.origin());
    LFM_CHECK(v->numel() == rows * cols && v->cols() == cols, "speech output weights: tensor '", n, "' has shape ",
              shape_str(v->shape), ", expected [", rows, ", ", cols, "]");
    LFM_CHECK(dtype_decodable(v->dtype), "speech output weights: tensor '", n, "' has type ", dtype_name(v->dtype),
              " which no kernel supports");
    TensorView out = *v;
    out.shape = {rows, cols};
    return out;
  }
  std::vector<float> vec(const std::string& n, int64_t size) {
    const TensorView v = view(n, 1, size);
    std::vector<float> out(static_cast<size_t>(size));
    dequantize_row(v.dtype, v.data, out.data(), size);
    return out;
  }
  // Rows [first, first + count) of a matrix, each head's rows reordered from RoPE's interleaved
  // pairs (0,1), (2,3), … to the rotate-half halves (0, 2, 4, … | 1, 3, 5, …) when `permute_heads`:
  // q·k is unchanged when q and k are permuted alike, so the backend's NeoX RoPE (and its fused
  // q/k norm, whose weights are permuted the same way) computes the interleaved rotation.
  TensorView rows(const TensorView& m, int64_t first, int64_t count, int64_t head_dim, bool permute_heads) {
    const size_t rb = m.row_bytes();
    std::vector<uint8_t> bytes(rb * static_cast<size_t>(count));
    for (int64_t r = 0; r < count; ++r) {
      int64_t src = r;
      if (permute_heads) {
        const int64_t h = r / head_dim, i = r % head_dim, half = head_dim / 2;
        src = h * head_dim + (i < half ? 2 * i : 2 * (i - half) + 1);
      }
      std::memcpy(bytes.data() + rb * static_cast<size_t>(r), m.row(first + src), rb);
    }
    owned_.push_back(std::move(bytes));
    TensorView out = m;
    out.shape = {count, m.cols()};
    out.data = owned_.back().data();
    out.nbytes = owned_.back().size();
    return out;
  }

 private:
  const TensorSource& src_;
  std::vector<std::vector<uint8_t>>& owned_;
};

std::vector<float> permuted_head(const std::vector<float>& w) {
  const size_t half = w.size() / 2;
  std::vector<float> out(w.size());
  for (size_t i = 0; i < half; ++i) out[i] = w[2 * i], out[i + half] = w[2 * i + 1];
  return out;
}

}  // namespace

SpeechOutModel::SpeechOutModel(SpeechOutConfig cfg, std::shared_ptr<const TensorSource> source, Backend* backend)
    : cfg_(std::move(cfg)), source_(std::move(source)), w_(std::make_unique<Weights>()) {
  const int64_t C = cfg_.codebooks, V = cfg_.audio_vocab, D = cfg_.text_hidden, dim = cfg_.dim;
  const int64_t hd = cfg_.head_dim(), kv = cfg_.kv_heads * hd, F = cfg_.ffn;
  LFM_CHECK(D > 0, "speech output: the backbone's hidden size is unknown");
  Weights& w = *w_;
  Binder b(*source_, w.owned);
  w.audio_embedding = b.view("audio_embedding.embedding.weight", C * V, D);
  w.depth_linear = b.view("depth_linear.weight", C * dim, D);
  w.depth_linear_b = b.vec("depth_linear.bias", C * dim);
  for (int64_t i = 0; i < cfg_.layers; ++i) {
    const std::string p = "depthformer.layers." + std::to_string(i) + ".";
    DepthLayerWeights l;
    l.attn_norm = b.vec(p + "operator_norm.weight", dim);
    const TensorView qkv = b.view(p + "operator.qkv_proj.weight", dim + 2 * kv, dim);
    l.q = b.rows(qkv, 0, dim, hd, true);
    l.k = b.rows(qkv, dim, kv, hd, true);
    l.v = b.rows(qkv, dim + kv, kv, hd, false);
    l.q_norm = permuted_head(b.vec(p + "operator.bounded_attention.q_layernorm.weight", hd));
    l.k_norm = permuted_head(b.vec(p + "operator.bounded_attention.k_layernorm.weight", hd));
    l.out = b.view(p + "operator.out_proj.weight", dim, dim);
    l.ffn_norm = b.vec(p + "ffn_norm.weight", dim);
    l.w1 = b.view(p + "feed_forward.w1.weight", F, dim);
    l.w3 = b.view(p + "feed_forward.w3.weight", F, dim);
    l.w2 = b.view(p + "feed_forward.w2.weight", dim, F);
    w.layers.push_back(std::move(l));
  }
  for (int64_t c = 0; c < C; ++c) {
    const std::string p = "depth_embeddings." + std::to_string(c) + ".";
    DepthCodebookWeights cb;
    cb.embedding = b.view(p + "embedding.weight", V, dim);
    cb.norm = b.vec(p + "embedding_norm.weight", dim);
    cb.head = cfg_.tie || !b.find(p + "to_logits.weight") ? cb.embedding : b.view(p + "to_logits.weight", V, dim);
    w.codebooks.push_back(std::move(cb));
  }
  // transformers' rotary frequencies for the depth steps (float32 as it computes them):
  // 1 / θ^(2i / head_dim), i < head_dim / 2.
  std::vector<float> inv(static_cast<size_t>(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i)
    inv[static_cast<size_t>(i)] =
        1.0f / std::pow(static_cast<float>(cfg_.rope_theta), static_cast<float>(2 * i) / static_cast<float>(hd));
  w.inv_freq = std::move(inv);

  WeightSet set;
  std::set<const void*> keep;  // bytes read as tables (never released) or made here
  for (const auto& bytes : w.owned) keep.insert(bytes.data());
  w.audio_embedding_table = w.audio_embedding;
  set.tables.push_back(&w.audio_embedding_table);
  keep.insert(w.audio_embedding.data);
  set.matrices.push_back(&w.depth_linear);
  for (WeightVector* v : {&w.depth_linear_b, &w.inv_freq}) set.vectors.push_back(v);
  for (DepthLayerWeights& l : w.layers) {
    for (TensorView* t : {&l.q, &l.k, &l.v, &l.out, &l.w1, &l.w3, &l.w2}) set.matrices.push_back(t);
    for (WeightVector* v : {&l.attn_norm, &l.q_norm, &l.k_norm, &l.ffn_norm}) set.vectors.push_back(v);
  }
  for (DepthCodebookWeights& cb : w.codebooks) {
    set.tables.push_back(&cb.embedding);
    keep.insert(cb.embedding.data);
    set.matrices.push_back(&cb.head);
    set.vectors.push_back(&cb.norm);
  }
  const TensorSource* src = source_.get();
  set.release_original = [src, keep](const TensorView& t) {
    if (!keep.count(t.data)) src->drop_pages(t);
  };
  w.prepared = backend ? backend->prepare_weights(set) : prepare_cpu_weights(set);
}

SpeechOutModel::~SpeechOutModel() = default;

void SpeechOutModel::frame_embedding(std::span<const int32_t> codes, float* out) const {
  const int64_t C = cfg_.codebooks, V = cfg_.audio_vocab, D = cfg_.text_hidden;
  LFM_CHECK(static_cast<int64_t>(codes.size()) == C, "speech output: a frame of ", codes.size(), " codes, the model has ",
            C, " codebooks");
  std::vector<float> row(static_cast<size_t>(D));
  std::fill(out, out + D, 0.0f);
  const TensorView& t = w_->audio_embedding;  // the stored bytes (a table is never released)
  for (int64_t c = 0; c < C; ++c) {
    const int32_t code = codes[static_cast<size_t>(c)];
    LFM_CHECK(code >= 0 && code < V, "speech output: code ", code, " of codebook ", c, " is outside [0, ", V, ")");
    dequantize_row(t.dtype, t.row(c * V + code), row.data(), D);
    for (int64_t i = 0; i < D; ++i) out[i] += row[static_cast<size_t>(i)];
  }
}

size_t SpeechOutModel::weight_bytes() const {
  size_t n = 0;
  for (const auto& name : source_->names())
    if (is_speech_out_tensor(name)) n += source_->find(name)->nbytes;
  return n;
}

}  // namespace lfm
