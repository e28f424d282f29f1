#include "convert/mmproj_export.h"

#include <filesystem>

#include "convert/quant.h"
#include "core/error.h"
#include "formats/gguf_writer.h"
#include "kernels/dequant.h"
#include "model/mmproj.h"

namespace lfm::gguf {

namespace {

Value f32_array(const float* v, int n) {
  std::vector<Value> items;
  for (int i = 0; i < n; ++i) items.push_back(Value::of_f32(v[i]));
  return Value::of_array(ValueType::F32, std::move(items));
}

}  // namespace

MmprojExportStats write_mmproj_gguf(const std::string& path, const VisionConfig& cfg, const TensorSource& vision,
                                    bool f32, const std::string& name) {
  GgufWriter w;
  w.set("general.architecture", Value::of_string("clip"));
  w.set("general.type", Value::of_string("mmproj"));
  w.set("general.name", Value::of_string(name));
  w.set("general.file_type", Value::of_u32(f32 ? 0 : 1));
  w.set("clip.has_vision_encoder", Value::of_bool(true));
  w.set("clip.projector_type", Value::of_string("lfm2"));
  w.set("clip.use_gelu", Value::of_bool(true));
  w.set("clip.vision.projection_dim", Value::of_u32(static_cast<uint32_t>(cfg.text_hidden_size)));
  // LFM2-VL has no fixed size (NaFlex); llama.cpp's converter writes 256 for compatibility.
  w.set("clip.vision.image_size", Value::of_u32(256));
  w.set("clip.vision.patch_size", Value::of_u32(static_cast<uint32_t>(cfg.patch_size)));
  w.set("clip.vision.embedding_length", Value::of_u32(static_cast<uint32_t>(cfg.hidden_size)));
  w.set("clip.vision.feed_forward_length", Value::of_u32(static_cast<uint32_t>(cfg.intermediate_size)));
  w.set("clip.vision.block_count", Value::of_u32(static_cast<uint32_t>(cfg.n_layers)));
  w.set("clip.vision.attention.head_count", Value::of_u32(static_cast<uint32_t>(cfg.n_heads)));
  w.set("clip.vision.attention.layer_norm_epsilon", Value::of_f32(static_cast<float>(cfg.layer_norm_eps)));
  w.set("clip.vision.image_mean", f32_array(cfg.image_mean, 3));
  w.set("clip.vision.image_std", f32_array(cfg.image_std, 3));
  w.set("clip.vision.projector.scale_factor", Value::of_u32(static_cast<uint32_t>(cfg.downsample_factor)));

  struct Out {
    std::string ours, theirs;
    std::vector<int64_t> shape;  // PyTorch order, as written
    DType type;
  };
  std::vector<Out> plan;
  for (const std::string& ours : vision.names()) {
    const std::optional<std::string> theirs = mmproj_name_from_lfm(ours);
    LFM_CHECK(theirs, "mmproj: tensor '", ours, "' has no place in the mmproj layout");
    const TensorView* t = vision.find(ours);
    std::vector<int64_t> shape = t->shape;
    if (ours == "vision.embeddings.patch_embedding.weight")
      shape = {cfg.hidden_size, cfg.num_channels, cfg.patch_size, cfg.patch_size};
    // Matrices (and the conv kernel) in F16 like llama.cpp's converter; vectors and the position
    // table in F32.
    const bool matrix = shape.size() >= 2 && ours != "vision.embeddings.position_embedding.weight";
    plan.push_back({ours, *theirs, shape, matrix && !f32 ? DType::F16 : DType::F32});
  }
  for (const Out& o : plan) w.add_tensor(o.theirs, std::vector<int64_t>(o.shape.rbegin(), o.shape.rend()), o.type);
  w.begin(path);
  for (const Out& o : plan) {
    const TensorView* t = vision.find(o.ours);
    std::vector<float> v(static_cast<size_t>(t->numel()));
    dequantize_row(t->dtype, t->data, v.data(), t->numel());
    if (o.ours == "vision.embeddings.patch_embedding.weight") {
      // lfm's [D, p·p·C] (row, column, channel) → the conv kernel [D, C, p, p].
      const int64_t D = cfg.hidden_size, C = cfg.num_channels, p = cfg.patch_size;
      std::vector<float> conv(v.size());
      for (int64_t d = 0; d < D; ++d)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t y = 0; y < p; ++y)
            for (int64_t x = 0; x < p; ++x)
              conv[static_cast<size_t>(((d * C + c) * p + y) * p + x)] = v[static_cast<size_t>(((d * p + y) * p + x) * C + c)];
      v.swap(conv);
    }
    std::vector<uint8_t> bytes(dtype_row_bytes(o.type, static_cast<int64_t>(v.size())));
    quantize_row(o.type, v.data(), bytes.data(), static_cast<int64_t>(v.size()));
    w.write(bytes.data(), bytes.size());
  }
  w.finish();
  return {std::filesystem::file_size(path), static_cast<int64_t>(plan.size())};
}

}  // namespace lfm::gguf
