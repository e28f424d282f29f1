// Detokenizer: loading the audio_detokenizer folder, the embedding and upsampling, one batched
// step (Forward → lin → iSTFT) and decode(). Streaming: model/detokenizer_streams.cpp.
#include "model/detokenizer.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "formats/renamed_source.h"
#include "formats/safetensors.h"
#include "kernels/dequant.h"
#include "kernels/weight_pack.h"
#include "model/detokenizer_impl.h"
#include "model/state_plan.h"

namespace lfm {

namespace {

constexpr int64_t kStepFrames = 256;  // decode() feeds at most this many frames per step (bounds its scratch)

// The stack's config: config.json as an Lfm2Config dict, read as a causal LM with a tied head
// (Forward runs such models; the head's logits are not used), sliding_window 30 when absent (as
// transformers' Lfm2AudioDetokenizer defaults it).
ModelConfig detokenizer_config(const std::string& path) {
  nlohmann::json j = parse_json(read_text_file(path, "detokenizer:"), cat("detokenizer: '", path, "'"));
  try {
    LFM_CHECK(j.is_object() && j.value("model_type", std::string()) == "lfm2", "detokenizer: model_type '",
              j.is_object() ? j.value("model_type", std::string("?")) : std::string("?"), "' (expected 'lfm2')");
    if (j.contains("output_size"))
      LFM_CHECK(j["output_size"].is_number_integer() && j["output_size"].get<int64_t>() == Detokenizer::kSpectrumWidth,
                "detokenizer: output_size ", json_excerpt(j["output_size"]), " (expected ", Detokenizer::kSpectrumWidth,
                ": 641 log-magnitudes and 641 phases)");
    if (!j.contains("sliding_window") || j["sliding_window"].is_null()) j["sliding_window"] = 30;
    j["architectures"] = nlohmann::json::array({"Lfm2ForCausalLM"});
    j.erase("tie_embedding");
    j["tie_word_embeddings"] = true;
    return parse_model_config(j);
  } catch (const nlohmann::json::exception& e) {
    fail("detokenizer: '", path, "': ", e.what());
  } catch (const Error& e) {
    fail(e.what(), " (in '", path, "')");
  }
}

const TensorView& tensor(const TensorSource& src, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorView* v = src.find(name);
  LFM_CHECK(v, "detokenizer: missing tensor '", name, "' (expected shape ", shape_str(shape), ") in ", src.origin());
  LFM_CHECK(v->shape == shape, "detokenizer: tensor '", name, "' has shape ", shape_str(v->shape), ", expected ",
            shape_str(shape));
  LFM_CHECK(dtype_decodable(v->dtype), "detokenizer: tensor '", name, "' has type ", dtype_name(v->dtype),
            " which cannot be decoded");
  return *v;
}

std::vector<float> decoded(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  dequantize_row(v.dtype, v.data, out.data(), v.numel());
  return out;
}

}  // namespace

int64_t Detokenizer::Impl::check_codes(std::span<const int32_t> codes, const char* who) {
  LFM_CHECK(codes.size() % kCodebooks == 0, who, ": ", codes.size(), " codes are not whole frames of ", kCodebooks,
            " codebooks");
  for (size_t i = 0; i < codes.size(); ++i)
    LFM_CHECK(codes[i] >= 0 && codes[i] < kCodes, who, ": code ", codes[i], " (frame ", i / kCodebooks, ", codebook ",
              i % kCodebooks, ") is outside [0, ", kCodes, ")");
  return static_cast<int64_t>(codes.size()) / kCodebooks;
}

void Detokenizer::Impl::upsampled_rows(std::span<const int32_t> codes, float* out) const {
  const int64_t d = lfm->config().hidden_size, frames = static_cast<int64_t>(codes.size()) / kCodebooks;
  const size_t row_bytes = dtype_row_bytes(emb.dtype, d);
  std::vector<float> row(static_cast<size_t>(d));
  for (int64_t f = 0; f < frames; ++f) {
    float* o = out + f * kUpsample * d;
    std::fill(o, o + d, 0.0f);
    // The mean over the codebooks as torch's .mean(dim=1): the rows summed in codebook order, / 8.
    for (int64_t c = 0; c < kCodebooks; ++c) {
      const int64_t id = c * kCodes + codes[static_cast<size_t>(f * kCodebooks + c)];
      dequantize_row(emb.dtype, static_cast<const uint8_t*>(emb.data) + static_cast<size_t>(id) * row_bytes, row.data(), d);
      for (int64_t e = 0; e < d; ++e) o[e] += row[static_cast<size_t>(e)];
    }
    for (int64_t e = 0; e < d; ++e) o[e] /= static_cast<float>(kCodebooks);
    // Nearest upsampling ×6 (F.interpolate "nearest-exact": output row r reads frame ⌊(r + ½) / 6⌋ = ⌊r / 6⌋).
    for (int64_t r = 1; r < kUpsample; ++r) std::copy(o, o + d, o + r * d);
  }
}

void Detokenizer::Impl::check_backend(const Backend& be, const char* who) const {
  LFM_CHECK(prepared_for == &be || (prepared_for == nullptr && be.host_memory()), who, ": the weights were prepared for ",
            prepared_for ? prepared_for->name() : "the CPU", ", not for the ", be.name(),
            " backend (load it with LoadOptions::backend)");
}

void Detokenizer::Impl::step(Backend& be, Forward& fwd, Buffers& buf, std::span<const Item> items, Trace* trace) const {
  const int64_t d = lfm->config().hidden_size, W = kSpectrumWidth;
  int64_t total = 0;
  for (const Item& it : items) total += static_cast<int64_t>(it.codes.size()) / kCodebooks * kUpsample;
  buf.rows.resize(static_cast<size_t>(total * d));
  std::vector<BatchItem> batch(items.size());
  std::vector<BatchItem::Embeddings> embeddings(items.size());
  const std::vector<int32_t> ids(static_cast<size_t>(total), 0);  // every row is given as an embedding
  int64_t row = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t n = static_cast<int64_t>(items[i].codes.size()) / kCodebooks * kUpsample;
    upsampled_rows(items[i].codes, buf.rows.data() + row * d);
    embeddings[i] = {0, n, buf.rows.data() + row * d};
    batch[i].seq = items[i].seq;
    batch[i].tokens = std::span<const int32_t>(ids).subspan(static_cast<size_t>(row), static_cast<size_t>(n));
    batch[i].embeddings = std::span<const BatchItem::Embeddings>(&embeddings[i], 1);
    // Every row's final normed hidden state, and no head at all (the checkpoint's embedding table
    // is there only for loading).
    batch[i].all_logits = true;
    batch[i].hidden = true;
    batch[i].skip_logits = true;
    row += n;
  }
  StepOutput out;
  fwd.step(batch, out);
  // lin on the backend: [total, d] → [total, 1282] + bias.
  ensure_capacity(be, buf.in, static_cast<size_t>(total * d) * sizeof(float));
  ensure_capacity(be, buf.out, static_cast<size_t>(total * W) * sizeof(float));
  be.upload(buf.in.data(), out.hidden.data(), out.hidden.size() * sizeof(float));
  be.matmul(buf.in.as<float>(), total, lin, buf.out.as<float>());
  be.add_bias(buf.out.as<float>(), lin_bias.ptr(), total, W);
  buf.spectrum.resize(static_cast<size_t>(total * W));
  be.download(buf.spectrum.data(), buf.out.data(), buf.spectrum.size() * sizeof(float));
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t first = out.hidden_row[i];
    const int64_t n = static_cast<int64_t>(items[i].codes.size()) / kCodebooks * kUpsample;
    items[i].istft->push(buf.spectrum.data() + first * W, n, *items[i].samples);
  }
  if (trace) {
    trace->upsampled.insert(trace->upsampled.end(), buf.rows.begin(), buf.rows.end());
    trace->hidden.insert(trace->hidden.end(), out.hidden.begin(), out.hidden.end());
    trace->spectrum.insert(trace->spectrum.end(), buf.spectrum.begin(), buf.spectrum.end());
  }
}

std::unique_ptr<StateCache> make_detokenizer_cache(const Model& lfm, Backend& be, int64_t streams, int64_t rows) {
  StateCacheOptions opt;
  opt.block_tokens = 16;
  opt.type = DType::F32;  // as transformers runs it (float32 checkpoints); the states are small
  opt.n_blocks = streams * ((rows + opt.block_tokens - 1) / opt.block_tokens);
  opt.n_slots = streams;
  opt.prefix_cache = false;  // streams share no prefixes
  return std::make_unique<StateCache>(state_shape(lfm.config()), opt, be);
}

Detokenizer::Detokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Detokenizer::~Detokenizer() = default;

int64_t Detokenizer::samples_per_frame() const { return kUpsample * InverseStft::kHop; }
const ModelConfig& Detokenizer::config() const { return impl_->lfm->config(); }
int64_t Detokenizer::max_frames() const { return config().max_position / kUpsample; }

std::unique_ptr<Detokenizer> Detokenizer::load(const std::string& folder, const LoadOptions& options) {
  namespace fs = std::filesystem;
  LFM_CHECK(fs::is_directory(folder), "detokenizer: '", folder, "' is not a folder");
  return load_source(detokenizer_config((fs::path(folder) / "config.json").string()),
                     std::make_shared<SafetensorsCheckpoint>(folder), options);
}

std::unique_ptr<Detokenizer> Detokenizer::load_source(ModelConfig cfg, std::shared_ptr<const TensorSource> source,
                                                      const LoadOptions& options) {
  const int64_t d = cfg.hidden_size;
  auto impl = std::make_unique<Impl>();
  impl->base = std::move(source);
  const TensorSource& base = *impl->base;
  auto stack = std::make_unique<RenamedTensorSource>(impl->base, std::vector<std::pair<std::string, std::string>>{{"lfm.", "model."}});
  const char* own[] = {"emb.emb.weight", "lin.weight", "lin.bias", "istft.window"};
  for (const std::string& n : base.names()) {
    bool known = n.rfind("lfm.", 0) == 0;
    for (const char* o : own) known = known || n == o;
    LFM_CHECK(known, "detokenizer: unexpected tensor '", n, "' in ", base.origin());
  }
  impl->emb = tensor(base, "emb.emb.weight", {kCodebooks * kCodes, d});
  LFM_CHECK(d % dtype_traits(impl->emb.dtype).block_elems == 0, "detokenizer: emb.emb.weight rows of ", d,
            " values are not whole ", dtype_name(impl->emb.dtype), " blocks");
  impl->lin = tensor(base, "lin.weight", {kSpectrumWidth, d});
  impl->lin_bias = decoded(tensor(base, "lin.bias", {kSpectrumWidth}));
  impl->window = decoded(tensor(base, "istft.window", {InverseStft::kFft}));
  // The module's window is torch.hann_window(1280) (periodic); another one would be another model.
  for (int64_t j = 0; j < InverseStft::kFft; ++j) {
    const double hann = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * static_cast<double>(j) / InverseStft::kFft);
    LFM_CHECK(std::fabs(impl->window[static_cast<size_t>(j)] - hann) < 1e-6, "detokenizer: istft.window[", j, "] = ",
              impl->window[static_cast<size_t>(j)], " is not the periodic Hann window's ", hann);
  }
  impl->lfm = std::make_unique<Model>(std::move(cfg), std::move(stack), options);
  if (options.pack) {
    WeightSet set;
    set.matrices.push_back(&impl->lin);
    set.vectors.push_back(&impl->lin_bias);
    const TensorSource* src = impl->base.get();
    set.release_original = [src](const TensorView& t) { src->drop_pages(t); };
    impl->prepared = options.backend ? options.backend->prepare_weights(set) : prepare_cpu_weights(set);
    impl->prepared_for = options.backend;
  }
  return std::unique_ptr<Detokenizer>(new Detokenizer(std::move(impl)));
}

std::vector<float> Detokenizer::decode(Backend& be, std::span<const int32_t> codes, Trace* trace) const {
  const Impl& m = *impl_;
  const int64_t frames = Impl::check_codes(codes, "detokenizer");
  LFM_CHECK(frames <= max_frames(), "detokenizer: ", frames, " frames exceed the ", max_frames(),
            " one sequence may have (max_position_embeddings / ", kUpsample, ")");
  m.check_backend(be, "detokenizer");
  std::vector<float> samples;
  if (frames == 0) return samples;
  samples.reserve(static_cast<size_t>(frames * samples_per_frame()));
  auto cache = make_detokenizer_cache(*m.lfm, be, 1, frames * kUpsample);
  Forward fwd(*m.lfm, be, *cache);
  Sequence* seq = cache->open(frames * kUpsample);
  InverseStft istft(m.window);
  Impl::Buffers buf;
  try {
    for (int64_t f = 0; f < frames; f += kStepFrames) {
      const int64_t n = std::min(kStepFrames, frames - f);
      const Impl::Item item{seq, &istft, codes.subspan(static_cast<size_t>(f * kCodebooks), static_cast<size_t>(n * kCodebooks)),
                            &samples};
      m.step(be, fwd, buf, std::span<const Impl::Item>(&item, 1), trace);
    }
    istft.finish(samples);
  } catch (...) {
    cache->close(seq);
    throw;
  }
  cache->close(seq);
  return samples;
}

}  // namespace lfm
