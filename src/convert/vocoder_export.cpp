#include "convert/vocoder_export.h"

#include <filesystem>

#include "convert/quant.h"
#include "core/error.h"
#include "formats/gguf_writer.h"
#include "kernels/dequant.h"

namespace lfm::gguf {

DType vocoder_matrix_type(FileType ft) {
  switch (ft) {
    case FileType::F32: return DType::F32;
    case FileType::F16: return DType::F16;
    case FileType::BF16: return DType::BF16;
    case FileType::Q4_0: case FileType::Q4_1: case FileType::Q4_K_S: case FileType::Q4_K_M: case FileType::Q3_K_S:
    case FileType::Q3_K_M: case FileType::Q3_K_L: return DType::Q4_0;
    default: return DType::Q8_0;
  }
}

namespace {

struct Planned {
  std::string gguf;                 // its name in the file
  const TensorView* src = nullptr;  // what it is written from
  std::vector<int64_t> shape;       // PyTorch order as stored
  DType type = DType::F32;
};

// Vectors, biases, norms and the detokenizer's conv taps stay F32 (as llama.cpp's converter keeps them).
bool keeps_f32(const std::string& name, const std::vector<int64_t>& shape) {
  return shape.size() < 2 || name.ends_with(".bias") || name.find("norm.weight") != std::string::npos ||
         name.find("layernorm") != std::string::npos || name.ends_with(".conv.weight") || name == "istft.window";
}

DType type_for(const std::string& name, const std::vector<int64_t>& shape, DType matrix) {
  if (keeps_f32(name, shape)) return DType::F32;
  const int64_t block = dtype_traits(matrix).block_elems;
  return shape.back() % block == 0 ? matrix : DType::F16;
}

}  // namespace

MmprojExportStats write_vocoder_gguf(const std::string& path, const SpeechOutConfig& cfg, const TensorSource& checkpoint,
                                     const TensorSource* detokenizer, FileType ft, const std::string& name) {
  const DType matrix = vocoder_matrix_type(ft);
  auto find = [&](const std::string& n) -> const TensorView* {
    if (const TensorView* v = checkpoint.find("model." + n)) return v;
    return checkpoint.find(n);
  };
  std::vector<Planned> plan;
  auto add = [&](const std::string& ours, const std::string& theirs, bool required = true) {
    const TensorView* v = find(ours);
    LFM_CHECK(v || !required, "vocoder: tensor '", ours, "' is missing from ", checkpoint.origin());
    if (!v) return;
    LFM_CHECK(dtype_decodable(v->dtype), "vocoder: tensor '", ours, "' has type ", dtype_name(v->dtype),
              " which lfm cannot decode");
    plan.push_back({theirs, v, v->shape, type_for(theirs, v->shape, matrix)});
  };
  for (int64_t i = 0; i < cfg.layers; ++i) {
    const std::string p = "depthformer.layers." + std::to_string(i) + ".";
    for (const char* t : {"operator_norm.weight", "operator.qkv_proj.weight", "operator.out_proj.weight", "ffn_norm.weight",
                          "feed_forward.w1.weight", "feed_forward.w2.weight", "feed_forward.w3.weight"})
      add(p + t, p + t);
    // llama.cpp shortens "bounded_attention" ("otherwise too long for ggml").
    for (const char* t : {"q_layernorm.weight", "k_layernorm.weight"})
      add(p + "operator.bounded_attention." + t, p + "operator.attention." + t);
  }
  add("depth_linear.weight", "depth_linear.weight");
  add("depth_linear.bias", "depth_linear.bias");
  for (int64_t c = 0; c < cfg.codebooks; ++c) {
    const std::string p = "depth_embeddings." + std::to_string(c) + ".";
    add(p + "embedding.weight", p + "embedding.weight");
    add(p + "embedding_norm.weight", p + "embedding_norm.weight");
    // The runner reads every head: a tied one is its embedding.
    if (find(p + "to_logits.weight"))
      add(p + "to_logits.weight", p + "to_logits.weight");
    else
      add(p + "embedding.weight", p + "to_logits.weight");
  }
  add("audio_embedding.embedding.weight", "audio_embedding.embedding.weight");
  add("audio_embedding.embedding_norm.weight", "audio_embedding.embedding_norm.weight", false);
  add("audio_embedding.to_logits.weight", "audio_embedding.to_logits.weight", false);
  if (detokenizer)
    for (const std::string& n : detokenizer->names()) {
      const TensorView* v = detokenizer->find(n);
      std::vector<int64_t> shape = v->shape;
      if (n.ends_with(".conv.weight") && shape.size() == 3 && shape[1] == 1) shape = {shape[0], shape[2]};
      LFM_CHECK(dtype_decodable(v->dtype), "vocoder: detokenizer tensor '", n, "' has type ", dtype_name(v->dtype),
                " which lfm cannot decode");
      plan.push_back({n, v, shape, type_for(n, shape, matrix)});
    }

  GgufWriter w;
  // What llama.cpp's converter writes: no llama architecture (the file is not a language model).
  w.set("general.architecture",
        Value::of_string("this model cannot be used as LLM, use it via --model-vocoder in TTS examples"));
  w.set("general.name", Value::of_string(name));
  w.set("depthformer_n_layer", Value::of_u32(static_cast<uint32_t>(cfg.layers)));
  w.set("depthformer_n_embd", Value::of_u32(static_cast<uint32_t>(cfg.dim)));
  for (const Planned& p : plan) w.add_tensor(p.gguf, std::vector<int64_t>(p.shape.rbegin(), p.shape.rend()), p.type);
  w.begin(path);
  for (const Planned& p : plan) {
    std::vector<float> v(static_cast<size_t>(p.src->numel()));
    dequantize_row(p.src->dtype, p.src->data, v.data(), p.src->numel());
    const int64_t cols = p.shape.back(), rows = static_cast<int64_t>(v.size()) / cols;
    std::vector<uint8_t> bytes(dtype_row_bytes(p.type, cols) * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(p.type, v.data() + r * cols, bytes.data() + dtype_row_bytes(p.type, cols) * static_cast<size_t>(r), cols);
    w.write(bytes.data(), bytes.size());
  }
  w.finish();
  return {std::filesystem::file_size(path), static_cast<int64_t>(plan.size())};
}

}  // namespace lfm::gguf
