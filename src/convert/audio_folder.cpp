#include "convert/audio_folder.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_guard.h"
#include "core/limits.h"
#include "formats/renamed_source.h"
#include "formats/safetensors.h"
#include "model/audio_mmproj.h"

namespace lfm::gguf {

namespace {

bool is_speech_config(const nlohmann::json& j) {
  if (j.value("model_type", std::string()) == "lfm2_audio") return true;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array())
    for (const auto& x : *a)
      if (x.is_string() && x.get<std::string>() == "Lfm2AudioForConditionalGeneration") return true;
  return false;
}

// The encoder's sizes from its tensors ([out, in] matrices, bias_u [h, dh], conv kernels).
AudioConfig sizes_from_tensors(const TensorSource& s, int64_t text_hidden, const std::string& where) {
  auto shape = [&](const std::string& name, size_t dims) -> const std::vector<int64_t>& {
    const TensorView* t = s.find(name);
    LFM_CHECK(t, "convert: ", where, " lacks tensor 'model.", name, "'");
    LFM_CHECK(t->shape.size() == dims, "convert: ", where, ": 'model.", name, "' has shape ", shape_str(t->shape),
              ", expected ", dims, " dims");
    return t->shape;
  };
  AudioConfig c;
  c.hidden_size = shape("conformer.subsampling.linear.weight", 2)[0];
  c.subsampling_channels = shape("conformer.subsampling.layers.0.weight", 4)[0];
  const int64_t lin_in = shape("conformer.subsampling.linear.weight", 2)[1];
  LFM_CHECK(lin_in % c.subsampling_channels == 0, "convert: ", where, ": subsampling.linear input ", lin_in,
            " is not a multiple of the ", c.subsampling_channels, " channels");
  c.num_mel_bins = lin_in / c.subsampling_channels * c.subsampling_factor;
  c.n_heads = shape("conformer.layers.0.self_attn.bias_u", 2)[0];
  c.intermediate_size = shape("conformer.layers.0.feed_forward1.linear1.weight", 2)[0];
  c.conv_kernel_size = shape("conformer.layers.0.conv.depthwise_conv.weight", 3)[2];
  while (c.n_layers < limits::kMaxLayers && s.find("conformer.layers." + std::to_string(c.n_layers) + ".norm_out.weight"))
    ++c.n_layers;
  c.text_hidden_size = text_hidden;
  c.front_end.num_mel_bins = static_cast<int>(c.num_mel_bins);
  // Every tensor of the layout with its shape (a missing block part, a wrong width).
  for (const AudioTensor& t : lfm2a_tensor_layout(c, true)) {
    const TensorView* v = s.find(t.name);
    LFM_CHECK(v, "convert: ", where, " lacks tensor 'model.", t.name, "'");
    LFM_CHECK(v->shape == t.shape, "convert: ", where, ": 'model.", t.name, "' has shape ", shape_str(v->shape),
              ", expected ", shape_str(t.shape));
  }
  return c;
}

}  // namespace

std::optional<AudioFolder> read_audio_folder(const std::string& folder) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(folder) / "config.json").string();
  const nlohmann::json j = parse_json(read_text_file(config_path, "config:"), cat("config: '", config_path, "'"));
  if (!is_speech_config(j)) return std::nullopt;
  AudioFolder a;
  const auto lfm = j.find("lfm");
  LFM_CHECK(lfm != j.end() && lfm->is_object(), "config: '", config_path, "' is a speech checkpoint without an 'lfm' dict");
  try {
    a.text = parse_model_config(*lfm);
  } catch (const Error& e) {
    fail(e.what(), " (the 'lfm' dict of '", config_path, "')");
  }
  auto base = std::make_shared<SafetensorsCheckpoint>(folder);
  a.text_source = std::make_unique<RenamedTensorSource>(base, std::vector<std::pair<std::string, std::string>>{
                                                                  {"model.lfm.", "model."}});
  a.audio_source = std::make_shared<RenamedTensorSource>(
      base, std::vector<std::pair<std::string, std::string>>{{"model.conformer.", "conformer."},
                                                             {"model.audio_adapter_", "audio_adapter_"},
                                                             {"model.audio_embedding.", "audio_embedding."}});
  a.audio = sizes_from_tensors(*a.audio_source, a.text.hidden_size, "'" + folder + "'");
  if (auto id = j.find("audio_token_id"); id != j.end() && id->is_number_integer()) a.audio.audio_token_id = id->get<int32_t>();
  return a;
}

}  // namespace lfm::gguf
