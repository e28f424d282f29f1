#include "model/vocoder_gguf.h"

#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lfm {

namespace {

constexpr const char* kLayers = "depthformer_n_layer";
constexpr const char* kWidth = "depthformer_n_embd";

std::string speech_name(const std::string& gguf) {
  std::string s = gguf;
  if (const size_t at = s.find(".operator.attention."); at != std::string::npos)
    s.replace(at, 20, ".operator.bounded_attention.");
  return s;
}

bool is_detokenizer_tensor(const std::string& n) {
  return n.starts_with("emb.") || n.starts_with("lfm.") || n.starts_with("lin.") || n.starts_with("istft.");
}

class VocoderSource : public MapTensorSource {
 public:
  VocoderSource(std::shared_ptr<const gguf::GgufFile> f, bool detokenizer) : file_(std::move(f)) {
    origin_ = file_->path();
    for (const gguf::TensorInfo& t : file_->tensors()) {
      const bool detok = is_detokenizer_tensor(t.name);
      LFM_CHECK(detok || is_speech_out_tensor(t.name), "vocoder: '", origin_, "': tensor '", t.name,
                "' belongs neither to the speech output head nor to the detokenizer");
      if (detok != detokenizer) continue;
      LFM_CHECK(dtype_decodable(t.dtype), "vocoder: '", origin_, "': tensor '", t.name, "' has type ",
                dtype_name(t.dtype), " which lfm cannot decode");
      std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());  // PyTorch order
      // The converter squeezes the short convs' taps [d, 1, k] to [d, k].
      if (detok && t.name.ends_with(".conv.weight") && shape.size() == 2) shape = {shape[0], 1, shape[1]};
      tensors_.emplace(detok ? t.name : speech_name(t.name), TensorView{t.dtype, std::move(shape), t.data, t.nbytes});
    }
  }
  void drop_pages(const TensorView& t) const override { file_->drop_pages(t.data, t.nbytes); }
  void detach(const std::vector<std::pair<const void*, size_t>>& keep) const override { file_->detach_from_file(keep); }

 private:
  std::shared_ptr<const gguf::GgufFile> file_;
};

const gguf::TensorInfo& need(const gguf::GgufFile& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  LFM_CHECK(t, "vocoder: '", f.path(), "' lacks tensor '", name, "'");
  return *t;
}

}  // namespace

bool is_vocoder_gguf(const gguf::GgufFile& f) { return f.find(kLayers) && f.find(kWidth); }

SpeechOutConfig speech_out_config_from_vocoder(const gguf::GgufFile& f, int64_t text_hidden) {
  LFM_CHECK(is_vocoder_gguf(f), "vocoder: '", f.path(), "' has no ", kLayers, " / ", kWidth,
            " keys: not a speech-output (vocoder) GGUF");
  SpeechOutConfig c;
  c.text_hidden = text_hidden;
  c.layers = f.find(kLayers)->as_int(kLayers);
  c.dim = f.find(kWidth)->as_int(kWidth);
  LFM_CHECK(c.layers >= 1 && c.layers <= 64 && c.dim >= 2 && c.dim <= 65536, "vocoder: '", f.path(), "': ", c.layers,
            " depthformer layers of width ", c.dim, " are out of range");
  const gguf::TensorInfo& qn = need(f, "depthformer.layers.0.operator.attention.q_layernorm.weight");
  const gguf::TensorInfo& qkv = need(f, "depthformer.layers.0.operator.qkv_proj.weight");
  const gguf::TensorInfo& w1 = need(f, "depthformer.layers.0.feed_forward.w1.weight");
  const gguf::TensorInfo& emb = need(f, "depth_embeddings.0.embedding.weight");
  const int64_t hd = qn.ne[0];
  LFM_CHECK(hd >= 2 && c.dim % hd == 0 && qkv.ne.size() == 2 && (qkv.ne[1] - c.dim) % (2 * hd) == 0, "vocoder: '",
            f.path(), "': a head size of ", hd, " does not split the depthformer's width ", c.dim, " and qkv_proj");
  c.heads = c.dim / hd;
  c.kv_heads = (qkv.ne[1] - c.dim) / (2 * hd);
  c.ffn = w1.ne.size() == 2 ? w1.ne[1] : 0;
  c.audio_vocab = emb.ne.size() == 2 ? emb.ne[1] : 0;
  c.audio_eos = static_cast<int32_t>(c.audio_vocab - 1);
  c.codebooks = 0;
  while (f.find_tensor("depth_embeddings." + std::to_string(c.codebooks) + ".embedding.weight")) ++c.codebooks;
  c.tie = false;  // the file stores every head (to_logits)
  LFM_CHECK(c.kv_heads >= 1 && c.heads % c.kv_heads == 0 && c.ffn > 0 && c.audio_vocab > 1 && c.codebooks > 0,
            "vocoder: '", f.path(), "': the depthformer's tensors do not fit together (", c.heads, " heads, ",
            c.kv_heads, " key/value heads, FFN ", c.ffn, ", ", c.codebooks, " codebooks of ", c.audio_vocab, " codes)");
  return c;
}

bool vocoder_has_detokenizer(const gguf::GgufFile& f) { return f.find_tensor("emb.emb.weight") != nullptr; }

ModelConfig detokenizer_config_from_vocoder(const gguf::GgufFile& f) {
  const gguf::TensorInfo& emb = need(f, "emb.emb.weight");
  const gguf::TensorInfo& tok = need(f, "lfm.embed_tokens.weight");
  LFM_CHECK(emb.ne.size() == 2 && tok.ne.size() == 2, "vocoder: '", f.path(), "': emb.emb / lfm.embed_tokens are not matrices");
  const int64_t d = emb.ne[0];
  nlohmann::json j;
  j["model_type"] = "lfm2";
  j["architectures"] = nlohmann::json::array({"Lfm2ForCausalLM"});
  j["hidden_size"] = d;
  j["vocab_size"] = tok.ne[1];
  j["norm_eps"] = 1e-5;
  j["rope_theta"] = 1e6;
  j["sliding_window"] = 30;
  j["max_position_embeddings"] = 128000;
  j["tie_word_embeddings"] = true;
  j["block_auto_adjust_ff_dim"] = false;
  nlohmann::json types = nlohmann::json::array();
  int64_t heads = 0, kv_heads = 0, ffn = 0, conv_l = 3;
  for (int64_t i = 0;; ++i) {
    const std::string p = "lfm.layers." + std::to_string(i) + ".";
    const gguf::TensorInfo* w1 = f.find_tensor(p + "feed_forward.w1.weight");
    if (!w1) break;
    LFM_CHECK(i < 256, "vocoder: '", f.path(), "': more than 256 detokenizer layers");
    ffn = w1->ne.size() == 2 ? w1->ne[1] : 0;
    if (const gguf::TensorInfo* conv = f.find_tensor(p + "conv.conv.weight")) {
      types.push_back("conv");
      conv_l = conv->ne[0];
    } else {
      types.push_back("sliding_attention");
      const gguf::TensorInfo& qn = need(f, p + "self_attn.q_layernorm.weight");
      const gguf::TensorInfo& k = need(f, p + "self_attn.k_proj.weight");
      LFM_CHECK(qn.ne[0] > 0 && d % qn.ne[0] == 0 && k.ne.size() == 2 && k.ne[1] % qn.ne[0] == 0, "vocoder: '", f.path(),
                "': detokenizer layer ", i, "'s head size ", qn.ne[0], " does not divide its widths");
      heads = d / qn.ne[0];
      kv_heads = k.ne[1] / qn.ne[0];
    }
  }
  LFM_CHECK(!types.empty() && ffn > 0, "vocoder: '", f.path(), "': no detokenizer layers (lfm.layers.N.…)");
  j["layer_types"] = types;
  j["num_hidden_layers"] = types.size();
  j["num_attention_heads"] = heads > 0 ? heads : 1;
  j["num_key_value_heads"] = kv_heads > 0 ? kv_heads : 1;
  j["intermediate_size"] = ffn;
  j["conv_L_cache"] = conv_l;
  try {
    return parse_model_config(j);
  } catch (const Error& e) {
    fail(e.what(), " (the detokenizer of '", f.path(), "')");
  }
}

std::shared_ptr<const TensorSource> vocoder_speech_out_source(std::shared_ptr<const gguf::GgufFile> f) {
  return std::make_shared<VocoderSource>(std::move(f), false);
}

std::shared_ptr<const TensorSource> vocoder_detokenizer_source(std::shared_ptr<const gguf::GgufFile> f) {
  return std::make_shared<VocoderSource>(std::move(f), true);
}

}  // namespace lfm
