// lfm convert: a Hugging Face folder (or a GGUF) → a GGUF file llama.cpp can load, in one of
// f32, f16, bf16, q8_0 and llama-quantize's block and K-quant mixes (type choices per tensor as
// llama.cpp makes them; see src/convert/quant_policy.h). Streams tensor by tensor; memory stays flat.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/json_guard.h"
#include "core/output_file.h"
#include "convert/audio_folder.h"
#include "convert/audio_mmproj_export.h"
#include "convert/gguf_export.h"
#include "convert/gguf_tokenizer_meta.h"
#include "convert/mmproj_export.h"
#include "convert/vocoder_export.h"
#include "formats/safetensors.h"
#include "model/speech_out.h"
#include "model/model.h"
#include "model/gguf_model.h"
#include "model/gguf_retrieval.h"
#include "model/retrieval.h"

namespace lfm::cli {
namespace {

int run_convert(int argc, char** argv) {
  CLI::App app{
      "Convert a model to GGUF (llama.cpp's tensor names and metadata).\n"
      "Types: f32, f16, bf16, q8_0 (as llama.cpp's converter: vectors and the conv kernel stay F32,\n"
      "rows not a multiple of 32 fall back to F16); q4_0, q4_1, q5_0, q5_1, q3_k_s, q3_k_m, q3_k_l,\n"
      "q4_k_s, q4_k_m, q5_k_s, q5_k_m and q6_k as llama-quantize (no imatrix): output/tied embedding\n"
      "Q6_K, q4_k_m/q5_k_m give Q6_K to attn_v and ffn_down in the 'more bits' layers, q3_k_m/q3_k_l\n"
      "and q4_k_s Q4_K/Q5_K to some, K-quants on rows not a multiple of 256 fall back to Q4_0 / Q5_0 /\n"
      "Q5_1 / Q8_0; src/convert/quant_policy.h has every rule)."};
  configure_app(app);
  std::string model, out, type = "f16", name;
  int threads = 0;
  bool quiet = false;
  app.add_option("-m,--model", model, std::string("Input: Hugging Face folder (config.json + safetensors) or .gguf") + kModelRefHelp)
      ->required();
  app.add_option("-o,--output", out, "Output .gguf path")->required();
  app.add_option("--type", type, gguf::file_type_names())->capture_default_str();
  app.add_option("--name", name, "general.name (default: the input's name)");
  app.add_option("-t,--threads", threads, "Quantization threads (0: all cores)")->capture_default_str()->check(non_negative_number());
  app.add_flag("-q,--quiet", quiet, "No progress bar or summary");
  std::string mmproj_out, vocoder_out;
  app.add_option("--vocoder-output", vocoder_out,
                 "LFM2.5-Audio: where the speech output and its detokenizer go, as llama.cpp's vocoder GGUF "
                 "(default: vocoder-<output name> beside the output; Q4_0 for q4 types, Q8_0 for other quantized types)");
  app.add_option("--mmproj-output", mmproj_out,
                 "LFM2-VL / LFM2-Audio: where the vision tower / speech encoder goes, as llama.cpp's mmproj GGUF "
                 "(default: mmproj-<output name> beside the output; F16 matrices, F32 with --type f32)");
  LFM_CLI_PARSE(app, argc, argv);

  namespace fs = std::filesystem;
  gguf::ExportOptions opt;
  opt.type = gguf::parse_file_type(type);
  opt.progress = !quiet;
  opt.threads = threads;
  const std::string input = resolve_model_arg(model);
  // Inputs are compared by identity (device + inode, canonical paths), never by spelling, and both
  // outputs are checked before anything is written (core/output_file.h).
  check_output_spares_input(out, input == model ? model : input, "convert");
  const std::optional<VisionCheckpoint> vision = fs::is_directory(input) ? open_vision_checkpoint(input) : std::nullopt;
  // LFM2-Audio: the backbone (its `lfm` dict and "model.lfm.…" tensors) and the speech encoder.
  std::optional<gguf::AudioFolder> audio = !vision && fs::is_directory(input) ? gguf::read_audio_folder(input) : std::nullopt;
  LFM_CHECK(vision || audio || mmproj_out.empty(), "convert: --mmproj-output, but '", input,
            "' has no vision tower or speech encoder");
  if (vision || audio) {
    if (mmproj_out.empty()) mmproj_out = (fs::path(out).parent_path() / ("mmproj-" + fs::path(out).filename().string())).string();
    check_distinct_outputs(out, mmproj_out, "convert: -o and --mmproj-output");
    check_output_spares_input(mmproj_out, input == model ? model : input, "convert: --mmproj-output");
  }
  std::unique_ptr<Model> m = audio ? std::make_unique<Model>(audio->text, std::move(audio->text_source), LoadOptions{.pack = false})
                                   : load_model(input, LoadOptions{.pack = false});
  // A retriever's head (pooling, prompts, PyLate facts, the Dense projection) goes along.
  std::optional<RetrievalConfig> head;
  std::shared_ptr<const TensorSource> dense;
  if (fs::is_regular_file(input)) {
    const gguf::GgufFile src(input);
    opt.extra = gguf::tokenizer_metadata_from_gguf(src);
    if (const gguf::Value* v = src.find("general.name"); v && v->type == gguf::ValueType::STRING) opt.name = v->str;
    head = gguf::retrieval_config_from_gguf(src, m->config());
    dense = gguf::gguf_dense_source(src);
  } else {
    opt.extra = gguf::tokenizer_metadata_from_folder(input, m->config().vocab_size);
    head = read_retrieval_config(input, m->config().hidden_size);
    if (head && head->dense_out > 0) dense = open_dense_module(input);
    // A Hub snapshot folder is named by its commit: name the output after the repository instead.
    opt.name = fs::path(input == model ? model : model.substr(0, model.find_first_of(":@"))).lexically_normal().filename().string();
    if (opt.name.empty()) opt.name = fs::absolute(model).parent_path().filename().string();
  }
  if (!name.empty()) opt.name = name;
  if (head) opt.retrieval = &*head;
  opt.dense = dense.get();
  gguf::SourceRowProducer rows(m->source());
  const gguf::ExportStats st = gguf::write_gguf_model(out, m->config(), rows, opt);
  if (!quiet) {
    std::fprintf(stderr, "wrote %s: %s, %.1f MiB in %.2f s; tensor types:", out.c_str(), gguf::file_type_label(opt.type),
                 st.file_bytes / 1048576.0, st.seconds);
    for (const auto& [t, n] : st.type_counts) std::fprintf(stderr, " %s x%lld", t.c_str(), static_cast<long long>(n));
    std::fprintf(stderr, "\n");
  }
  // An LFM2-VL folder: the vision tower as the pair's mmproj file.
  if (vision) {
    const auto ms = gguf::write_mmproj_gguf(mmproj_out, vision->config, *vision->source, opt.type == gguf::FileType::F32,
                                            opt.name);
    if (!quiet)
      std::fprintf(stderr, "wrote %s: the vision tower, %lld tensors, %.1f MiB\n", mmproj_out.c_str(),
                   static_cast<long long>(ms.tensors), ms.file_bytes / 1048576.0);
  }
  // An LFM2.5-Audio folder that speaks: the speech output (and its detokenizer) as llama.cpp's
  // vocoder GGUF, beside the pair.
  if (audio && fs::exists(fs::path(input) / "config.json")) {
    const SafetensorsCheckpoint ckpt(input);
    const std::vector<std::string> names = ckpt.names();
    if (std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.find("depthformer.") != std::string::npos; })) {
      const nlohmann::json j = parse_json(read_text_file((fs::path(input) / "config.json").string(), "config:"), "config");
      const SpeechOutConfig sc = parse_speech_out_config(j, m->config().hidden_size);
      std::unique_ptr<SafetensorsCheckpoint> detok;
      if (fs::exists(fs::path(input) / "audio_detokenizer" / "model.safetensors"))
        detok = std::make_unique<SafetensorsCheckpoint>((fs::path(input) / "audio_detokenizer").string());
      if (vocoder_out.empty()) vocoder_out = (fs::path(out).parent_path() / ("vocoder-" + fs::path(out).filename().string())).string();
      check_distinct_outputs(out, vocoder_out, "convert: -o and --vocoder-output");
      const auto vs = gguf::write_vocoder_gguf(vocoder_out, sc, ckpt, detok.get(), opt.type, opt.name);
      if (!quiet)
        std::fprintf(stderr, "wrote %s: the speech output%s, %lld tensors, %.1f MiB\n", vocoder_out.c_str(),
                     detok ? " and its detokenizer" : "", static_cast<long long>(vs.tensors), vs.file_bytes / 1048576.0);
    }
  }
  // An LFM2-Audio folder: the speech encoder and adapter as the pair's lfm2a mmproj file.
  if (audio) {
    const auto ms = gguf::write_audio_mmproj_gguf(mmproj_out, audio->audio, *audio->audio_source,
                                                  opt.type == gguf::FileType::F32, opt.name);
    if (!quiet)
      std::fprintf(stderr, "wrote %s: the speech encoder, %lld tensors, %.1f MiB\n", mmproj_out.c_str(),
                   static_cast<long long>(ms.tensors), ms.file_bytes / 1048576.0);
  }
  return 0;
}

CommandRegistrar reg({"convert", "convert a model to GGUF (f16, bf16, q8_0, q4_k_m, ...)", run_convert});

}  // namespace
}  // namespace lfm::cli
