// Kyutai's Mimi decoder (model/mimi.h) at its real size (kyutai/mimi's config: 8 transformer
// layers of 512, SEANet 1024 → 64 channels; random float32 weights written to a temporary file in
// transformers' layout, decoder tensors only): decode() of 10 s of audio (125 frames of random
// codes) on this machine's CPU backend. Real time is 10 s per iteration.
// Run: build/bench/lfm_microbench --benchmark_filter=Mimi
#include <benchmark/benchmark.h>

#include <filesystem>
#include <random>
#include <unistd.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/safetensors_writer.h"
#include "kernels/cpu_backend.h"
#include "model/mimi.h"

namespace {

using namespace lfm;

// Every tensor the decoder reads, named and shaped as transformers' MimiModel has them for `c`.
std::vector<SafetensorsWriter::Entry> mimi_decoder_tensors(const MimiConfig& c) {
  std::vector<SafetensorsWriter::Entry> e;
  const int64_t d = c.hidden_size, cd = c.codebook_dim, hd = c.head_dim, H = c.num_attention_heads;
  for (int64_t k = 0; k < 8; ++k) {
    const std::string p = k == 0 ? "quantizer.semantic_residual_vector_quantizer.layers.0.codebook."
                                 : cat("quantizer.acoustic_residual_vector_quantizer.layers.", k - 1, ".codebook.");
    e.push_back({p + "embed_sum", DType::F32, {c.codebook_size, cd}});
    e.push_back({p + "cluster_usage", DType::F32, {c.codebook_size}});
  }
  e.push_back({"quantizer.semantic_residual_vector_quantizer.output_proj.weight", DType::F32, {d, cd, 1}});
  e.push_back({"quantizer.acoustic_residual_vector_quantizer.output_proj.weight", DType::F32, {d, cd, 1}});
  e.push_back({"upsample.conv.weight", DType::F32, {d, 1, 4}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = cat("decoder_transformer.layers.", l, ".");
    for (const char* m : {"q_proj", "k_proj", "v_proj"}) e.push_back({p + "self_attn." + m + ".weight", DType::F32, {H * hd, d}});
    e.push_back({p + "self_attn.o_proj.weight", DType::F32, {d, H * hd}});
    e.push_back({p + "mlp.fc1.weight", DType::F32, {c.intermediate_size, d}});
    e.push_back({p + "mlp.fc2.weight", DType::F32, {d, c.intermediate_size}});
    for (const char* m : {"input_layernorm.weight", "input_layernorm.bias", "post_attention_layernorm.weight",
                          "post_attention_layernorm.bias", "self_attn_layer_scale.scale", "mlp_layer_scale.scale"})
      e.push_back({p + m, DType::F32, {d}});
  }
  int64_t idx = 0, ch = c.num_filters << c.upsampling_ratios.size();
  auto conv = [&](const std::string& p, int64_t in, int64_t out, int64_t k) {
    e.push_back({p + ".weight", DType::F32, {out, in, k}});
    e.push_back({p + ".bias", DType::F32, {out}});
  };
  conv(cat("decoder.layers.", idx++, ".conv"), d, ch, c.kernel_size);
  for (int64_t r : c.upsampling_ratios) {
    ++idx;
    const std::string p = cat("decoder.layers.", idx++, ".conv");
    e.push_back({p + ".weight", DType::F32, {ch, ch / 2, 2 * r}});
    e.push_back({p + ".bias", DType::F32, {ch / 2}});
    ch /= 2;
    const std::string b = cat("decoder.layers.", idx++, ".block.");
    conv(b + "1.conv", ch, ch / 2, c.residual_kernel_size);
    conv(b + "3.conv", ch / 2, ch, 1);
  }
  conv(cat("decoder.layers.", idx + 1, ".conv"), c.num_filters, 1, c.last_kernel_size);
  return e;
}

void BM_MimiDecode10s(benchmark::State& state) {
  const MimiConfig c;
  const std::string path = (std::filesystem::temp_directory_path() / cat("lfm_mimi_bench_", getpid(), ".safetensors")).string();
  {
    const auto entries = mimi_decoder_tensors(c);
    SafetensorsWriter w(path, entries);
    std::mt19937_64 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (const auto& t : entries) {
      int64_t n = 1;
      for (int64_t s : t.shape) n *= s;
      // Weights ~ N(0, 1 / fan_in) keep the activations O(1); norms 1, scales 0.1, usages 1.
      const int64_t fan_in = t.shape.size() > 1 ? n / t.shape[0] : 1;
      std::vector<float> v(static_cast<size_t>(n));
      const bool ones = t.name.find("cluster_usage") != std::string::npos || t.name.find("layernorm.weight") != std::string::npos;
      for (float& x : v)
        x = ones ? 1.0f : t.name.find("scale") != std::string::npos ? 0.1f : nd(rng) / std::sqrt(static_cast<float>(fan_in));
      w.write(t.name, v.data(), v.size() * sizeof(float));
    }
    w.finish();
  }
  const auto dec = MimiDecoder::load(path);
  std::filesystem::remove(path);
  ThreadPool pool(0);
  auto be = make_cpu_backend(pool);
  std::mt19937_64 rng(2);
  std::vector<int32_t> codes(125 * 8);
  for (int32_t& x : codes) x = static_cast<int32_t>(rng() % 2048);
  for (auto _ : state) benchmark::DoNotOptimize(dec->decode(*be, codes));
  state.counters["audio_s_per_s"] = benchmark::Counter(10.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MimiDecode10s)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

}  // namespace
