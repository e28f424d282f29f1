// lfm gen-random: a randomly initialised checkpoint of a real LFM2 family shape, as a Hugging
// Face folder or a GGUF file. A benchmarking tool: random weights say nothing about quality.
#include <cstdio>
#include <filesystem>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/output_file.h"
#include "convert/random_checkpoint.h"

namespace lfm::cli {
namespace {

int run_gen_random(int argc, char** argv) {
  std::string shapes;
  for (const auto& n : gguf::random_shape_names()) shapes += (shapes.empty() ? "" : ", ") + n;
  CLI::App app{
      "Write a randomly initialised LFM2 checkpoint of a real family shape, for BENCHMARKING ONLY:\n"
      "random weights say nothing about quality (outputs are noise). Deterministic from --seed\n"
      "(same seed, shape and type: identical bytes). Output: a Hugging Face folder (config.json +\n"
      "model.safetensors) or, when OUT ends in .gguf, a GGUF file. Shapes: " + shapes};
  configure_app(app);
  std::string shape = "tiny", out, type;
  uint64_t seed = 0;
  int threads = 0;
  bool config_only = false, quiet = false;
  app.add_option("--shape", shape, "Model shape: " + shapes)->capture_default_str();
  app.add_option("-o,--output", out, "Output folder, or a .gguf path")->required();
  app.add_option("--type", type,
                 "Storage type: f32, f16, bf16 (default) for folders; for GGUF also q8_0, q4_0, q4_1, q5_0,\n"
                 "q5_1, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k (llama-quantize's mixes,\n"
                 "as lfm convert)");
  app.add_option("--seed", seed, "Random seed")->capture_default_str();
  app.add_option("-t,--threads", threads, "Threads for quantizing GGUF output (0: all cores)")->check(non_negative_number());
  app.add_flag("--config-only", config_only, "Write only config.json (e.g. for `lfm info` on a real size)");
  app.add_flag("-q,--quiet", quiet, "No progress output");
  float branch_scale = 1.0f;
  app.add_option("--branch-scale", branch_scale,
                 "Scale of every residual branch's output projection; below 1 (e.g. 0.05) the model predicts "
                 "confidently from the last token and falls into repetition, for speculative-decoding benchmarks")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  std::string vision, retriever;
  app.add_option("--retriever", retriever,
                 "A retriever laid out as the released ones (folders only): embedding (LFM2.5-Embedding: "
                 "bidirectional, CLS pooling), colbert (LFM2.5-ColBERT: bidirectional, Dense to 128, PyLate files) "
                 "or colbert-causal (LFM2-ColBERT)");
  app.add_option("--vision", vision,
                 "LFM2-VL (folders only): add a vision tower and projector of this shape, siglip2-base "
                 "(LFM2-VL-450M's) or siglip2-so400m (LFM2-VL-1.6B's); `lfm convert` then writes llama.cpp's "
                 "GGUF pair");
  std::string audio, mmproj_out;
  app.add_option("--audio", audio,
                 "LFM2-Audio: add a speech encoder (FastConformer + adapter) of this shape, lfm2-audio (the 1.5B "
                 "models': d 512, 17 blocks; with --shape 1.2B), lfm2.5-audio (the same plus LFM2.5-Audio's speech "
                 "output: the depthformer and an audio_detokenizer/ folder) or tiny (both, tiny); a folder in "
                 "transformers' layout, or with a .gguf output llama.cpp's GGUF pair (the backbone and an lfm2a "
                 "mmproj: speech input only)");
  app.add_option("--mmproj-output", mmproj_out,
                 "With --audio and a .gguf output: where the mmproj goes (default: mmproj-<output name> beside it)");
  LFM_CLI_PARSE(app, argc, argv);

  const bool gguf_out = out.size() >= 5 && out.compare(out.size() - 5, 5, ".gguf") == 0;
  LFM_CHECK(vision.empty() || (!gguf_out && !config_only), "gen-random: --vision writes a Hugging Face folder");
  LFM_CHECK(retriever.empty() || (!gguf_out && !config_only),
            "gen-random: --retriever writes a Hugging Face folder (lfm convert makes the GGUF)");
  LFM_CHECK(audio.empty() || (vision.empty() && retriever.empty() && !config_only),
            "gen-random: --audio goes with neither --vision, --retriever nor --config-only");
  LFM_CHECK(mmproj_out.empty() || (!audio.empty() && gguf_out), "gen-random: --mmproj-output needs --audio and a .gguf output");
  if (!audio.empty() && gguf_out) {
    if (mmproj_out.empty())
      mmproj_out = (std::filesystem::path(out).parent_path() / ("mmproj-" + std::filesystem::path(out).filename().string())).string();
    check_distinct_outputs(out, mmproj_out, "gen-random: -o and --mmproj-output");
  }
  if (config_only) {
    LFM_CHECK(!gguf_out, "gen-random: --config-only writes a folder, not a .gguf");
    gguf::write_random_config(out, shape);
    return 0;
  }
  gguf::RandomCheckpointOptions opt;
  opt.shape = shape;
  opt.seed = seed;
  opt.progress = !quiet;
  opt.threads = threads;
  opt.branch_scale = branch_scale;
  opt.vision = vision;
  opt.retriever = retriever;
  opt.audio = audio;
  opt.mmproj_path = mmproj_out;
  if (type.empty()) type = "bf16";
  if (gguf_out) {
    opt.gguf_type = gguf::parse_file_type(type);
    gguf::write_random_gguf(out, opt);
  } else {
    const gguf::FileType ft = gguf::parse_file_type(type);
    LFM_CHECK(ft == gguf::FileType::F32 || ft == gguf::FileType::F16 || ft == gguf::FileType::BF16,
              "gen-random: a Hugging Face folder stores f32, f16 or bf16; use a .gguf output for ", type);
    opt.hf_dtype = ft == gguf::FileType::F32 ? DType::F32 : ft == gguf::FileType::F16 ? DType::F16 : DType::BF16;
    gguf::write_random_hf(out, opt);
  }
  if (!quiet && !mmproj_out.empty()) std::fprintf(stderr, "wrote %s (the speech encoder, audio shape %s)\n", mmproj_out.c_str(), audio.c_str());
  if (!quiet) std::fprintf(stderr, "wrote %s (shape %s, seed %llu, random weights: benchmarking only)\n", out.c_str(),
                           shape.c_str(), static_cast<unsigned long long>(seed));
  return 0;
}

CommandRegistrar reg({"gen-random", "write a random-weight checkpoint of a real shape (benchmarking only)", run_gen_random});

}  // namespace
}  // namespace lfm::cli
