#include "convert/audio_mmproj_export.h"

#include <cmath>
#include <filesystem>

#include "convert/quant.h"
#include "core/error.h"
#include "formats/gguf_writer.h"
#include "kernels/dequant.h"
#include "model/audio_mmproj.h"

namespace lfm::gguf {

namespace {

Value u32(int64_t v) {
  LFM_CHECK(v >= 0 && v <= 0xffffffffLL, "audio mmproj: value ", v, " does not fit a u32 metadata entry");
  return Value::of_u32(static_cast<uint32_t>(v));
}

std::vector<float> decode(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dequantize_row(t.dtype, t.data, v.data(), t.numel());
  return v;
}

// llama.cpp's converter keeps every conv tensor of the encoder in F32 (its ".conv" rule: the
// subsampling, the conv module's pointwise / depthwise convs and BatchNorm) and vectors; the
// relative-position biases [h, dh] stay F32 too (added to float32 activations).
bool keeps_f32(const std::string& binding, const std::vector<int64_t>& shape) {
  return shape.size() == 1 || binding.starts_with("conformer.subsampling.layers.") || binding.find(".conv.") != std::string::npos ||
         binding.ends_with("bias_u") || binding.ends_with("bias_v") || binding.ends_with("embedding_norm.weight");
}

}  // namespace

MmprojExportStats write_audio_mmproj_gguf(const std::string& path, const AudioConfig& cfg, const TensorSource& audio,
                                          bool f32, const std::string& name) {
  GgufWriter w;
  w.set("general.architecture", Value::of_string("clip"));
  w.set("general.type", Value::of_string("mmproj"));
  w.set("general.name", Value::of_string(name));
  w.set("general.file_type", Value::of_u32(f32 ? 0 : 1));
  w.set("clip.has_audio_encoder", Value::of_bool(true));
  w.set("clip.projector_type", Value::of_string("lfm2a"));
  w.set("clip.audio.projection_dim", u32(cfg.text_hidden_size));
  w.set("clip.audio.embedding_length", u32(cfg.hidden_size));
  // llama.cpp's converter writes d_model here (it overwrites intermediate_size); its graph and lfm
  // read the FFN width from ffn_up's shape. Kept so that both converters' files agree.
  w.set("clip.audio.feed_forward_length", u32(cfg.hidden_size));
  w.set("clip.audio.block_count", u32(cfg.n_layers));
  w.set("clip.audio.attention.head_count", u32(cfg.n_heads));
  w.set("clip.audio.num_mel_bins", u32(cfg.num_mel_bins));
  w.set("clip.audio.attention.layer_norm_epsilon", Value::of_f32(static_cast<float>(cfg.layer_norm_eps)));

  const bool running_stats = audio.find("conformer.layers.0.conv.norm.running_mean") != nullptr;
  struct Out {
    std::string ours, theirs;
    std::vector<int64_t> shape;  // PyTorch order, as stored
    DType type;
  };
  std::vector<Out> plan;
  std::vector<AudioTensor> layout = lfm2a_tensor_layout(cfg, running_stats);
  // The audio-output tensors llama.cpp's converter keeps (clip.cpp reads the first one's shape).
  const TensorView* emb = audio.find("audio_embedding.embedding.weight");
  LFM_CHECK(emb && emb->shape.size() == 2 && emb->shape[1] == cfg.text_hidden_size, "audio mmproj: ", audio.origin(),
            " has no audio_embedding.embedding.weight [V, ", cfg.text_hidden_size,
            "], which llama.cpp reads the projection width from");
  for (const char* extra : {"audio_embedding.embedding.weight", "audio_embedding.embedding_norm.weight",
                            "audio_embedding.to_logits.weight"})
    if (const TensorView* t = audio.find(extra)) layout.push_back({extra, t->shape});
  for (const AudioTensor& t : layout) {
    const TensorView* v = audio.find(t.name);
    LFM_CHECK(v, "audio mmproj: tensor '", t.name, "' is missing from ", audio.origin());
    LFM_CHECK(v->shape == t.shape, "audio mmproj: tensor '", t.name, "' of ", audio.origin(), " has shape ",
              shape_str(v->shape), ", expected ", shape_str(t.shape));
    LFM_CHECK(dtype_decodable(v->dtype), "audio mmproj: tensor '", t.name, "' has type ", dtype_name(v->dtype),
              " which lfm cannot decode");
    if (t.name.ends_with(".running_mean") || t.name.ends_with(".running_var")) continue;  // folded below
    const std::optional<std::string> theirs = audio_mmproj_name(t.name);
    LFM_CHECK(theirs, "audio mmproj: tensor '", t.name, "' has no place in the lfm2a layout");
    plan.push_back({t.name, *theirs, audio_mmproj_stored_shape(t.name, t.shape),
                    f32 || keeps_f32(t.name, t.shape) ? DType::F32 : DType::F16});
  }
  for (const Out& o : plan) w.add_tensor(o.theirs, std::vector<int64_t>(o.shape.rbegin(), o.shape.rend()), o.type);
  w.begin(path);
  for (const Out& o : plan) {
    std::vector<float> v = decode(*audio.find(o.ours));
    const bool norm_w = o.ours.ends_with(".conv.norm.weight"), norm_b = o.ours.ends_with(".conv.norm.bias");
    if (running_stats && (norm_w || norm_b)) {
      // BatchNorm in eval: y = (x − mean)·γ/√(var+eps) + β = x·a + b, a = γ/√(var+eps), b = β − mean·a
      // (llama.cpp's converter folds the same way; its graph computes x·a + b).
      const std::string stem = o.ours.substr(0, o.ours.rfind('.'));
      const std::vector<float> g = decode(*audio.find(stem + ".weight")), b = decode(*audio.find(stem + ".bias"));
      const std::vector<float> mean = decode(*audio.find(stem + ".running_mean"));
      const std::vector<float> var = decode(*audio.find(stem + ".running_var"));
      for (size_t i = 0; i < v.size(); ++i) {
        LFM_CHECK(var[i] + cfg.batch_norm_eps > 0, "audio mmproj: ", stem, ".running_var[", i, "] = ", var[i],
                  " gives no BatchNorm scale");
        const double a = static_cast<double>(g[i]) / std::sqrt(static_cast<double>(var[i]) + cfg.batch_norm_eps);
        v[i] = static_cast<float>(norm_w ? a : static_cast<double>(b[i]) - static_cast<double>(mean[i]) * a);
      }
    }
    std::vector<uint8_t> bytes(dtype_row_bytes(o.type, static_cast<int64_t>(v.size())));
    quantize_row(o.type, v.data(), bytes.data(), static_cast<int64_t>(v.size()));
    w.write(bytes.data(), bytes.size());
  }
  w.finish();
  return {std::filesystem::file_size(path), static_cast<int64_t>(plan.size())};
}

}  // namespace lfm::gguf
