// AudioModel: binding the speech encoder's and adapter's tensors (model/audio_model.h's names),
// with the load-time folds of model/audio_weights.h, and their preparation by the backend.
// The encoding itself: model/audio_encoding.cpp.
#include "model/audio_model.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/dequant.h"
#include "kernels/weight_pack.h"
#include "model/audio_weights.h"

namespace lfm {

namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The shape without its size-1 dimensions ([C, 1, 3, 3] → [C, 3, 3]; [2d, d, 1] → [2d, d]).
std::vector<int64_t> squeezed(const std::vector<int64_t>& shape) {
  std::vector<int64_t> out;
  for (int64_t d : shape)
    if (d != 1) out.push_back(d);
  return out;
}

// Binds the encoder's tensors by name and shape (size-1 dimensions aside: a Conv1d's [2d, d, 1]
// is the matrix [2d, d]); every tensor of the source must be used.
class AudioBinder {
 public:
  AudioBinder(const TensorSource& src, std::vector<std::vector<uint8_t>>& owned) : src_(src), owned_(owned) {}

  bool has(const std::string& name) const { return src_.find(name) != nullptr; }

  // A matrix matmul reads, viewed as [rows, cols].
  TensorView matrix(const std::string& name, int64_t rows, int64_t cols) {
    TensorView v = get(name, {rows, cols});
    LFM_CHECK(dtype_decodable(v.dtype), "audio weights: tensor '", name, "' has type ", dtype_name(v.dtype),
              " which no kernel supports");
    v.shape = {rows, cols};
    return v;
  }
  // A matrix made at load from a stored one: its values decoded, `edit`ed, and stored again in
  // the same type where that is exact (F32, F16, BF16: halving and moving values are), else F32.
  TensorView edited_matrix(const std::string& name, int64_t rows, int64_t cols,
                           const std::function<void(std::vector<float>&)>& edit) {
    const TensorView v = matrix(name, rows, cols);
    std::vector<float> f(static_cast<size_t>(rows * cols));
    dequantize_row(v.dtype, v.data, f.data(), rows * cols);
    edit(f);
    TensorView out;
    out.dtype = v.dtype == DType::F16 || v.dtype == DType::BF16 ? v.dtype : DType::F32;
    out.shape = {rows, cols};
    std::vector<uint8_t> bytes(f.size() * (out.dtype == DType::F32 ? 4 : 2));
    if (out.dtype == DType::F32) {
      std::memcpy(bytes.data(), f.data(), bytes.size());
    } else {
      auto* h = reinterpret_cast<uint16_t*>(bytes.data());
      for (size_t i = 0; i < f.size(); ++i) h[i] = out.dtype == DType::BF16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
    }
    owned_.push_back(std::move(bytes));
    out.data = owned_.back().data();
    out.nbytes = owned_.back().size();
    return out;
  }
  std::vector<float> vec(const std::string& name, std::vector<int64_t> shape) {
    const TensorView v = get(name, shape);
    LFM_CHECK(dtype_decodable(v.dtype), "audio weights: tensor '", name, "' has type ", dtype_name(v.dtype),
              " which cannot be decoded");
    std::vector<float> out(static_cast<size_t>(v.numel()));
    dequantize_row(v.dtype, v.data, out.data(), v.numel());
    return out;
  }
  void check_no_extra() const {
    for (const auto& n : src_.names())
      LFM_CHECK(used_.count(n), "audio weights: unexpected tensor '", n, "' in ", src_.origin(),
                " (not part of this speech encoder's configuration)");
  }

 private:
  TensorView get(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorView* v = src_.find(name);
    LFM_CHECK(v, "audio weights: missing tensor '", name, "' (expected shape ", shape_str(shape), ") in ",
              src_.origin());
    LFM_CHECK(v->numel() == product(shape) && squeezed(v->shape) == squeezed(shape), "audio weights: tensor '", name,
              "' has shape ", shape_str(v->shape), ", expected ", shape_str(shape));
    used_.insert(name);
    return *v;
  }
  const TensorSource& src_;
  std::vector<std::vector<uint8_t>>& owned_;  // the bytes of the edited matrices (their buffers never move)
  std::set<std::string> used_;
};

void halve(std::vector<float>& f) {
  for (float& x : f) x *= 0.5f;
}

// A macaron FFN of layer prefix p: "norm_<ffn>" then "<ffn>.linear1", "<ffn>.linear2".
AudioFfnWeights bind_ffn(AudioBinder& b, const std::string& layer, const std::string& ffn, int64_t d, int64_t I) {
  AudioFfnWeights f;
  f.norm_w = b.vec(layer + "norm_" + ffn + ".weight", {d});
  f.norm_b = b.vec(layer + "norm_" + ffn + ".bias", {d});
  const std::string p = layer + ffn + ".";
  f.up = b.matrix(p + "linear1.weight", I, d);
  f.up_b = b.vec(p + "linear1.bias", {I});
  // x + ½·(W2 z + b2) = x + (½W2) z + ½b2 exactly: halving is exact in binary floating point.
  f.down = b.edited_matrix(p + "linear2.weight", d, I, halve);
  std::vector<float> down_b = b.vec(p + "linear2.bias", {d});
  halve(down_b);
  f.down_b = std::move(down_b);
  return f;
}

}  // namespace

AudioModel::AudioModel(AudioConfig cfg, std::shared_ptr<const TensorSource> source, Backend* backend)
    : cfg_(std::move(cfg)), source_(std::move(source)), w_(std::make_unique<Weights>()) {
  const int64_t d = cfg_.hidden_size, I = cfg_.intermediate_size, H = cfg_.n_heads, dh = cfg_.head_dim();
  const int64_t C = cfg_.subsampling_channels, F8 = cfg_.num_mel_bins / 8, K = cfg_.conv_kernel_size;
  const int64_t D = cfg_.text_hidden_size;
  LFM_CHECK(d > 0 && H > 0 && d % H == 0 && C > 0 && F8 > 0 && K % 2 == 1 && D > 0,
            "audio model: an invalid config (parse it with parse_audio_config)");
  Weights& w = *w_;
  AudioBinder b(*source_, w.owned);
  const std::string s = "conformer.subsampling.";
  w.conv0_w = b.vec(s + "layers.0.weight", {C, 1, 3, 3});
  w.conv0_b = b.vec(s + "layers.0.bias", {C});
  w.conv2_w = b.vec(s + "layers.2.weight", {C, 1, 3, 3});
  w.conv2_b = b.vec(s + "layers.2.bias", {C});
  w.conv3 = b.matrix(s + "layers.3.weight", C, C);
  w.conv3_b = b.vec(s + "layers.3.bias", {C});
  w.conv5_w = b.vec(s + "layers.5.weight", {C, 1, 3, 3});
  w.conv5_b = b.vec(s + "layers.5.bias", {C});
  w.conv6 = b.matrix(s + "layers.6.weight", C, C);
  w.conv6_b = b.vec(s + "layers.6.bias", {C});
  // NeMo flattens the last conv's [C, T', F/8] channel-major (column c·F/8 + f); the activations
  // here are [T', F/8, C] (column f·C + c): the same linear with its columns moved.
  w.linear = b.edited_matrix(s + "linear.weight", d, F8 * C, [&](std::vector<float>& m) {
    std::vector<float> row(static_cast<size_t>(F8 * C));
    for (int64_t o = 0; o < d; ++o) {
      float* r = m.data() + o * F8 * C;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t f = 0; f < F8; ++f) row[static_cast<size_t>(f * C + c)] = r[c * F8 + f];
      std::copy(row.begin(), row.end(), r);
    }
  });
  w.linear_b = b.vec(s + "linear.bias", {d});
  if (cfg_.scale_input) w.input_scale = std::vector<float>(static_cast<size_t>(d), std::sqrt(static_cast<float>(d)));

  for (int64_t i = 0; i < cfg_.n_layers; ++i) {
    const std::string p = "conformer.layers." + std::to_string(i) + ".";
    AudioLayerWeights l;
    l.ff1 = bind_ffn(b, p, "feed_forward1", d, I);
    l.ff2 = bind_ffn(b, p, "feed_forward2", d, I);
    l.att_norm_w = b.vec(p + "norm_self_att.weight", {d});
    l.att_norm_b = b.vec(p + "norm_self_att.bias", {d});
    l.q = b.matrix(p + "self_attn.q_proj.weight", d, d);
    l.k = b.matrix(p + "self_attn.k_proj.weight", d, d);
    l.v = b.matrix(p + "self_attn.v_proj.weight", d, d);
    l.o = b.matrix(p + "self_attn.o_proj.weight", d, d);
    l.pos = b.matrix(p + "self_attn.relative_k_proj.weight", d, d);
    l.q_b = b.vec(p + "self_attn.q_proj.bias", {d});
    l.k_b = b.vec(p + "self_attn.k_proj.bias", {d});
    l.v_b = b.vec(p + "self_attn.v_proj.bias", {d});
    l.o_b = b.vec(p + "self_attn.o_proj.bias", {d});
    l.bias_u = b.vec(p + "self_attn.bias_u", {H, dh});
    l.bias_v = b.vec(p + "self_attn.bias_v", {H, dh});
    l.conv_norm_w = b.vec(p + "norm_conv.weight", {d});
    l.conv_norm_b = b.vec(p + "norm_conv.bias", {d});
    l.pw1 = b.matrix(p + "conv.pointwise_conv1.weight", 2 * d, d);
    l.pw1_b = b.vec(p + "conv.pointwise_conv1.bias", {2 * d});
    l.pw2 = b.matrix(p + "conv.pointwise_conv2.weight", d, d);
    l.pw2_b = b.vec(p + "conv.pointwise_conv2.bias", {d});
    // BatchNorm (eval) after the depthwise conv: y·a + sh with a = γ / √(var + eps), sh = β − mean·a
    // (or, as llama.cpp stores it, weight and bias already a and sh); folded into the conv's taps
    // and bias: w' = a·w, b' = a·b + sh.
    std::vector<float> dw = b.vec(p + "conv.depthwise_conv.weight", {d, 1, K});
    std::vector<float> dw_b = b.vec(p + "conv.depthwise_conv.bias", {d});
    const std::vector<float> gamma = b.vec(p + "conv.norm.weight", {d}), beta = b.vec(p + "conv.norm.bias", {d});
    const bool stats = b.has(p + "conv.norm.running_mean") || b.has(p + "conv.norm.running_var");
    std::vector<float> mean, var;
    if (stats) {
      mean = b.vec(p + "conv.norm.running_mean", {d});
      var = b.vec(p + "conv.norm.running_var", {d});
    }
    for (int64_t c = 0; c < d; ++c) {
      double a = gamma[c], sh = beta[c];
      if (stats) {
        LFM_CHECK(var[c] + cfg_.batch_norm_eps > 0, "audio weights: layer ", i, " conv.norm.running_var[", c,
                  "] = ", var[c], " is negative");
        a = gamma[c] / std::sqrt(static_cast<double>(var[c]) + cfg_.batch_norm_eps);
        sh = beta[c] - mean[c] * a;
      }
      for (int64_t j = 0; j < K; ++j) dw[c * K + j] = static_cast<float>(dw[c * K + j] * a);
      dw_b[c] = static_cast<float>(dw_b[c] * a + sh);
    }
    l.dw = std::move(dw);
    l.dw_b = std::move(dw_b);
    l.out_norm_w = b.vec(p + "norm_out.weight", {d});
    l.out_norm_b = b.vec(p + "norm_out.bias", {d});
    w.layers.push_back(std::move(l));
  }
  w.adapter_norm_w = b.vec("audio_adapter_norm.weight", {d});
  w.adapter_norm_b = b.vec("audio_adapter_norm.bias", {d});
  w.adapter1 = b.matrix("audio_adapter_linear_1.weight", D, d);
  w.adapter1_b = b.vec("audio_adapter_linear_1.bias", {D});
  w.adapter2 = b.matrix("audio_adapter_linear_2.weight", D, D);
  w.adapter2_b = b.vec("audio_adapter_linear_2.bias", {D});
  b.check_no_extra();

  WeightSet set;
  std::set<const void*> owned;
  for (const auto& bytes : w.owned) owned.insert(bytes.data());
  for (TensorView* t : {&w.conv3, &w.conv6, &w.linear, &w.adapter1, &w.adapter2}) set.matrices.push_back(t);
  for (WeightVector* v :
       {&w.conv0_w, &w.conv0_b, &w.conv2_w, &w.conv2_b, &w.conv5_w, &w.conv5_b, &w.conv3_b, &w.conv6_b, &w.linear_b,
        &w.input_scale, &w.adapter_norm_w, &w.adapter_norm_b, &w.adapter1_b, &w.adapter2_b})
    if (!v->empty()) set.vectors.push_back(v);
  for (AudioLayerWeights& l : w.layers) {
    for (TensorView* t :
         {&l.ff1.up, &l.ff1.down, &l.ff2.up, &l.ff2.down, &l.q, &l.k, &l.v, &l.o, &l.pos, &l.pw1, &l.pw2})
      set.matrices.push_back(t);
    for (WeightVector* v : {&l.ff1.norm_w, &l.ff1.norm_b, &l.ff1.up_b,   &l.ff1.down_b, &l.ff2.norm_w,  &l.ff2.norm_b,
                            &l.ff2.up_b,   &l.ff2.down_b, &l.att_norm_w, &l.att_norm_b, &l.q_b,         &l.k_b,
                            &l.v_b,        &l.o_b,        &l.bias_u,     &l.bias_v,     &l.conv_norm_w, &l.conv_norm_b,
                            &l.pw1_b,      &l.pw2_b,      &l.dw,         &l.dw_b,       &l.out_norm_w,  &l.out_norm_b})
      set.vectors.push_back(v);
  }
  const TensorSource* src = source_.get();
  set.release_original = [src, owned](const TensorView& t) {
    if (!owned.count(t.data)) src->drop_pages(t);
  };
  w.prepared = backend ? backend->prepare_weights(set) : prepare_cpu_weights(set);
}

AudioModel::~AudioModel() = default;

size_t AudioModel::weight_bytes() const {
  size_t n = 0;
  for (const auto& name : source_->names()) n += source_->find(name)->nbytes;
  return n;
}

}  // namespace lfm
