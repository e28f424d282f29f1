// MimiDecoder's loading: transformers' layout (config.json + model.safetensors) or moshi's (the
// .safetensors file LFM2-Audio-1.5B ships, with kyutai/mimi's config), every decoder tensor
// checked against the config's shape and decoded to float32 once; the matrices laid out for the
// step's im2col / overlap-add (model/mimi_impl.h) and prepared for the CPU kernels.
#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "formats/safetensors.h"
#include "kernels/cpu_backend.h"
#include "kernels/dequant.h"
#include "kernels/weight_pack.h"
#include "model/mimi_impl.h"

namespace lfm {

namespace {

namespace fs = std::filesystem;

const char* kHfProbe = "quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum";
const char* kMoshiProbe = "quantizer.rvq_first.vq.layers.0._codebook.embedding_sum";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// moshi's name → transformers' (the renames of transformers' convert_mimi_checkpoint_to_pytorch,
// applied in that order); self_attn.in_proj_weight keeps its name (split by the loader).
std::string hf_name(std::string n) {
  static const std::pair<const char*, const char*> renames[] = {
      {"conv.conv.conv", "conv"},
      {"convtr.convtr.convtr", "conv"},
      {"conv.conv", "conv"},
      {"convtr.convtr", "conv"},
      {"quantizer.rvq_first.vq", "quantizer.semantic_residual_vector_quantizer"},
      {"quantizer.rvq_first", "quantizer.semantic_residual_vector_quantizer"},
      {"quantizer.rvq_rest.vq", "quantizer.acoustic_residual_vector_quantizer"},
      {"quantizer.rvq_rest", "quantizer.acoustic_residual_vector_quantizer"},
      {"_codebook", "codebook"},
      {"_initialized", "initialized"},
      {"embedding_sum", "embed_sum"},
      {"encoder.model", "encoder.layers"},
      {"decoder.model", "decoder.layers"},
      {"encoder_transformer.transformer", "encoder_transformer"},
      {"decoder_transformer.transformer", "decoder_transformer"},
      {"linear1", "mlp.fc1"},
      {"linear2", "mlp.fc2"},
      {"self_attn.out_proj", "self_attn.o_proj"},
      {"norm1", "input_layernorm"},
      {"norm2", "post_attention_layernorm"},
      {"layer_scale_1", "self_attn_layer_scale"},
      {"layer_scale_2", "mlp_layer_scale"},
  };
  for (const auto& [from, to] : renames)
    if (n.find(from) != std::string::npos) n = replace_all(n, from, to);
  return n;
}

// The file's tensors under transformers' names.
class Tensors {
 public:
  Tensors(std::shared_ptr<const TensorSource> src) : src_(std::move(src)) {  // NOLINT
    moshi_ = src_->find(kMoshiProbe) != nullptr;
    LFM_CHECK(moshi_ || src_->find(kHfProbe), "mimi: ", src_->origin(), " holds no Mimi (neither '", kHfProbe,
              "' nor moshi's '", kMoshiProbe, "')");
    for (const std::string& n : src_->names()) by_hf_[moshi_ ? hf_name(n) : n] = n;
  }
  bool moshi() const { return moshi_; }
  std::string origin() const { return src_->origin(); }

  // The tensor's float32 values; lfm::Error naming it when missing, of another shape or undecodable.
  std::vector<float> get(const std::string& name, const std::vector<int64_t>& shape) const {
    auto it = by_hf_.find(name);
    LFM_CHECK(it != by_hf_.end(), "mimi: missing tensor '", name, "'", moshi_ ? " (in moshi's naming)" : "",
              " (expected shape ", shape_str(shape), ") in ", src_->origin());
    const TensorView& v = *src_->find(it->second);
    LFM_CHECK(v.shape == shape, "mimi: tensor '", it->second, "' has shape ", shape_str(v.shape), ", expected ",
              shape_str(shape), " (in ", src_->origin(), ")");
    LFM_CHECK(dtype_decodable(v.dtype), "mimi: tensor '", it->second, "' has type ", dtype_name(v.dtype),
              " which cannot be decoded");
    std::vector<float> out(static_cast<size_t>(v.numel()));
    dequantize_row(v.dtype, v.data, out.data(), v.numel());
    for (size_t i = 0; i < out.size(); ++i)
      LFM_CHECK(std::isfinite(out[i]), "mimi: tensor '", it->second, "' holds a non-finite value at element ", i,
                " (in ", src_->origin(), ")");
    return out;
  }

 private:
  std::shared_ptr<const TensorSource> src_;
  bool moshi_ = false;
  std::map<std::string, std::string> by_hf_;
};

// moshi's q / k rows are interleaved pairs per head (its RoPE rotates adjacent values);
// transformers' rotate halves: row h·hd + i·hd/2 + j of the result is row h·hd + 2j + i.
std::vector<float> halves_from_pairs(const std::vector<float>& w, int64_t heads, int64_t hd, int64_t cols) {
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < hd / 2; ++j)
        std::copy_n(w.begin() + ((h * hd + 2 * j + i) * cols), cols, out.begin() + ((h * hd + i * hd / 2 + j) * cols));
  return out;
}

class Builder {
 public:
  Builder(MimiDecoder::Impl& m, const Tensors& t) : m_(m), t_(t) {}

  TensorView matrix(std::vector<float> values, int64_t rows, int64_t cols) {
    m_.store.push_back(std::move(values));
    TensorView v;
    v.dtype = DType::F32;
    v.shape = {rows, cols};
    v.data = m_.store.back().data();
    v.nbytes = static_cast<size_t>(rows * cols) * sizeof(float);
    return v;
  }

  // A causal Conv1d `name` (torch weight [out, in, kernel], bias [out]) → tap-major [out, kernel · in].
  MimiConv conv(const std::string& name, int64_t in, int64_t out, int64_t kernel, int64_t dilation) {
    MimiConv c;
    c.in = in, c.out = out, c.kernel = kernel, c.dilation = dilation;
    const std::vector<float> w = t_.get(name + ".weight", {out, in, kernel});
    std::vector<float> taps(w.size());
    for (int64_t o = 0; o < out; ++o)
      for (int64_t ci = 0; ci < in; ++ci)
        for (int64_t j = 0; j < kernel; ++j) taps[static_cast<size_t>((o * kernel + j) * in + ci)] = w[static_cast<size_t>((o * in + ci) * kernel + j)];
    c.w = matrix(std::move(taps), out, kernel * in);
    c.bias = t_.get(name + ".bias", {out});
    return c;
  }

  // A ConvTranspose1d `name` (torch weight [in, out, kernel], bias [out]) → [kernel · out, in].
  MimiConvTr conv_tr(const std::string& name, int64_t in, int64_t out, int64_t kernel, int64_t stride) {
    MimiConvTr c;
    c.in = in, c.out = out, c.kernel = kernel, c.stride = stride;
    const std::vector<float> w = t_.get(name + ".weight", {in, out, kernel});
    std::vector<float> rows(w.size());
    for (int64_t ci = 0; ci < in; ++ci)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t j = 0; j < kernel; ++j) rows[static_cast<size_t>((j * out + o) * in + ci)] = w[static_cast<size_t>((ci * out + o) * kernel + j)];
    c.w = matrix(std::move(rows), kernel * out, in);
    c.bias = t_.get(name + ".bias", {out});
    return c;
  }

 private:
  MimiDecoder::Impl& m_;
  const Tensors& t_;
};

void build(MimiDecoder::Impl& m, const Tensors& t) {
  const MimiConfig& c = m.cfg;
  const int64_t d = c.hidden_size, cd = c.codebook_dim, V = c.codebook_size;
  Builder b(m, t);
  // Codebooks: the semantic quantizer's only one, then the acoustic quantizer's first 7.
  for (int64_t k = 0; k < MimiDecoder::kCodebooks; ++k) {
    const std::string p = k == 0 ? "quantizer.semantic_residual_vector_quantizer.layers.0.codebook."
                                 : cat("quantizer.acoustic_residual_vector_quantizer.layers.", k - 1, ".codebook.");
    std::vector<float> e = t.get(p + "embed_sum", {V, cd});
    const std::vector<float> usage = t.get(p + "cluster_usage", {V});
    for (int64_t r = 0; r < V; ++r) {
      const float u = std::max(usage[static_cast<size_t>(r)], 1e-5f);
      for (int64_t i = 0; i < cd; ++i) e[static_cast<size_t>(r * cd + i)] /= u;
    }
    m.codebooks.push_back(std::move(e));
  }
  m.semantic_proj = b.matrix(t.get("quantizer.semantic_residual_vector_quantizer.output_proj.weight", {d, cd, 1}), d, cd);
  m.acoustic_proj = b.matrix(t.get("quantizer.acoustic_residual_vector_quantizer.output_proj.weight", {d, cd, 1}), d, cd);
  // The upsample: depthwise (groups = d), kernel 2 · ⌊encoder rate / frame rate⌋, stride 2, no bias.
  const int64_t encoder_rate = (c.sampling_rate + c.hop() - 1) / c.hop();
  const int64_t up_kernel = 2 * static_cast<int64_t>(static_cast<double>(encoder_rate) / c.frame_rate);
  LFM_CHECK(up_kernel >= c.upsample_stride(), "mimi: the upsample's kernel ", up_kernel, " (from frame_rate ", c.frame_rate,
            ") is shorter than its stride ", c.upsample_stride());
  m.upsample.in = m.upsample.out = d;
  m.upsample.kernel = up_kernel;
  m.upsample.stride = c.upsample_stride();
  m.upsample.depthwise = true;
  m.upsample.taps = t.get("upsample.conv.weight", {d, 1, up_kernel});
  // The decoder transformer.
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, hd = c.head_dim;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = cat("decoder_transformer.layers.", l, ".");
    MimiLayer L;
    if (t.moshi()) {
      LFM_CHECK(KV == H, "mimi: moshi's layout packs q, k, v of equal heads; num_key_value_heads ", KV, " != ", H);
      const std::vector<float> qkv = t.get(p + "self_attn.in_proj_weight", {3 * H * hd, d});
      const auto part = [&](int64_t i) {
        return std::vector<float>(qkv.begin() + i * H * hd * d, qkv.begin() + (i + 1) * H * hd * d);
      };
      L.q = b.matrix(halves_from_pairs(part(0), H, hd, d), H * hd, d);
      L.k = b.matrix(halves_from_pairs(part(1), H, hd, d), H * hd, d);
      L.v = b.matrix(part(2), H * hd, d);
    } else {
      L.q = b.matrix(t.get(p + "self_attn.q_proj.weight", {H * hd, d}), H * hd, d);
      L.k = b.matrix(t.get(p + "self_attn.k_proj.weight", {KV * hd, d}), KV * hd, d);
      L.v = b.matrix(t.get(p + "self_attn.v_proj.weight", {KV * hd, d}), KV * hd, d);
    }
    L.o = b.matrix(t.get(p + "self_attn.o_proj.weight", {d, H * hd}), d, H * hd);
    L.fc1 = b.matrix(t.get(p + "mlp.fc1.weight", {c.intermediate_size, d}), c.intermediate_size, d);
    L.fc2 = b.matrix(t.get(p + "mlp.fc2.weight", {d, c.intermediate_size}), d, c.intermediate_size);
    L.ln1_w = t.get(p + "input_layernorm.weight", {d});
    L.ln1_b = t.get(p + "input_layernorm.bias", {d});
    L.ln2_w = t.get(p + "post_attention_layernorm.weight", {d});
    L.ln2_b = t.get(p + "post_attention_layernorm.bias", {d});
    L.attn_scale = t.get(p + "self_attn_layer_scale.scale", {d});
    L.mlp_scale = t.get(p + "mlp_layer_scale.scale", {d});
    m.layers.push_back(std::move(L));
  }
  m.inv_freq = rope_inverse_frequencies(c.rope_theta, hd);
  // SEANet: decoder.layers.<i> counts every module (the ELUs too).
  int64_t idx = 0, ch = c.num_filters;
  for (size_t i = 0; i < c.upsampling_ratios.size(); ++i) ch *= 2;
  m.convs.push_back(b.conv(cat("decoder.layers.", idx++, ".conv"), d, ch, c.kernel_size, 1));
  for (int64_t ratio : c.upsampling_ratios) {
    ++idx;  // ELU
    m.trs.push_back(b.conv_tr(cat("decoder.layers.", idx++, ".conv"), ch, ch / 2, 2 * ratio, ratio));
    ch /= 2;
    int64_t dilation = 1;
    for (int64_t j = 0; j < c.num_residual_layers; ++j, dilation *= c.dilation_growth_rate) {
      const std::string p = cat("decoder.layers.", idx++, ".block.");
      m.convs.push_back(b.conv(p + "1.conv", ch, ch / c.compress, c.residual_kernel_size, dilation));
      m.convs.push_back(b.conv(p + "3.conv", ch / c.compress, ch, 1, 1));
    }
  }
  ++idx;  // ELU
  m.convs.push_back(b.conv(cat("decoder.layers.", idx, ".conv"), c.num_filters, 1, c.last_kernel_size, 1));
}

}  // namespace

MimiDecoder::MimiDecoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MimiDecoder::~MimiDecoder() = default;

bool MimiDecoder::is_mimi_file(const std::string& path) {
  try {
    const fs::path file = fs::is_directory(path) ? fs::path(path) / "model.safetensors" : fs::path(path);
    if (!fs::is_regular_file(file)) return false;
    const SafetensorsFile f(file.string());
    return f.find(kMoshiProbe) != nullptr || f.find(kHfProbe) != nullptr;
  } catch (const Error&) {
    return false;
  }
}

std::string MimiDecoder::find_in_folder(const std::string& folder) {
  std::vector<std::string> candidates;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    // The language model's own shards are not a Mimi (and are the large files).
    if (e.is_regular_file(ec) && e.path().extension() == ".safetensors" && name.rfind("model", 0) != 0)
      candidates.push_back(e.path().string());
  }
  std::sort(candidates.begin(), candidates.end());
  for (const std::string& f : candidates)
    if (is_mimi_file(f)) return f;
  return "";
}

std::unique_ptr<MimiDecoder> MimiDecoder::load(const std::string& path, const LoadOptions& options) {
  auto impl = std::make_unique<Impl>();
  std::shared_ptr<const TensorSource> src;
  std::string config;
  if (fs::is_directory(path)) {
    config = (fs::path(path) / "config.json").string();
    LFM_CHECK(fs::exists(config), "mimi: the folder '", path, "' has no config.json");
    src = std::make_shared<SafetensorsCheckpoint>(path);
  } else {
    LFM_CHECK(fs::is_regular_file(path), "mimi: '", path, "' is neither a folder nor a file");
    src = std::make_shared<SafetensorsFile>(path);
    // transformers' model.safetensors with its config.json beside it; a moshi file beside another
    // model's config (LFM2-Audio's) takes kyutai/mimi's values.
    const fs::path beside = fs::path(path).parent_path() / "config.json";
    if (fs::exists(beside)) {
      const nlohmann::json j = parse_json(read_text_file(beside.string(), "mimi:"), cat("mimi: '", beside.string(), "'"));
      if (j.is_object() && j.value("model_type", std::string()) == "mimi") config = beside.string();
    }
  }
  impl->cfg = config.empty() ? MimiConfig{} : parse_mimi_config(config);
  const Tensors tensors(src);
  build(*impl, tensors);
  if (options.pack) {
    WeightSet set;
    set.matrices = {&impl->semantic_proj, &impl->acoustic_proj};
    for (MimiLayer& L : impl->layers) {
      for (TensorView* v : {&L.q, &L.k, &L.v, &L.o, &L.fc1, &L.fc2}) set.matrices.push_back(v);
      for (WeightVector* v : {&L.ln1_w, &L.ln1_b, &L.ln2_w, &L.ln2_b, &L.attn_scale, &L.mlp_scale}) set.vectors.push_back(v);
    }
    for (MimiConv& c : impl->convs) set.matrices.push_back(&c.w), set.vectors.push_back(&c.bias);
    for (MimiConvTr& c : impl->trs) set.matrices.push_back(&c.w), set.vectors.push_back(&c.bias);
    set.vectors.push_back(&impl->inv_freq);
    set.release_original = [](const TensorView&) {};  // our own float32 copies: kept
    impl->prepared = prepare_cpu_weights(set);
  }
  return std::unique_ptr<MimiDecoder>(new MimiDecoder(std::move(impl)));
}

const MimiConfig& MimiDecoder::config() const { return impl_->cfg; }
int MimiDecoder::sample_rate() const { return static_cast<int>(impl_->cfg.sampling_rate); }
int64_t MimiDecoder::samples_per_frame() const { return impl_->cfg.hop() * impl_->cfg.upsample_stride(); }
int64_t MimiDecoder::max_frames() const { return impl_->cfg.max_position_embeddings / impl_->cfg.upsample_stride(); }
int64_t MimiDecoder::attention_window() const { return impl_->cfg.sliding_window; }

Backend& MimiDecoder::Impl::runner(Backend& be) const {
  if (be.host_memory()) return be;
  std::lock_guard lock(cpu_mu);
  if (!cpu) {
    cpu_pool = std::make_unique<ThreadPool>(0);
    cpu = make_cpu_backend(*cpu_pool);
  }
  return *cpu;
}

}  // namespace lfm
