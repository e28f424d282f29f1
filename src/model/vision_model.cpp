#include "model/vision_model.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "image/resize.h"
#include "kernels/dequant.h"
#include "kernels/weight_pack.h"

namespace lfm {

namespace {

// Binds the vision checkpoint's tensors by name and shape; every tensor must be used.
class VisionBinder {
 public:
  explicit VisionBinder(const TensorSource& src) : src_(src) {}

  TensorView matrix(const std::string& name, std::vector<int64_t> shape) {
    const TensorView& v = get(name, shape);
    LFM_CHECK(dtype_decodable(v.dtype), "vision weights: tensor '", name, "' has type ", dtype_name(v.dtype),
              " which no kernel supports");
    return v;
  }
  std::vector<float> vec(const std::string& name, std::vector<int64_t> shape) {
    const TensorView& v = get(name, shape);
    LFM_CHECK(dtype_decodable(v.dtype), "vision weights: tensor '", name, "' has type ", dtype_name(v.dtype),
              " which cannot be decoded");
    std::vector<float> out(static_cast<size_t>(v.numel()));
    dequantize_row(v.dtype, v.data, out.data(), v.numel());
    return out;
  }
  std::vector<float> optional_vec(bool present, const std::string& name, std::vector<int64_t> shape) {
    return present ? vec(name, std::move(shape)) : std::vector<float>();
  }
  void check_no_extra() const {
    for (const auto& n : src_.names())
      LFM_CHECK(used_.count(n), "vision weights: unexpected tensor '", n, "' in ", src_.origin(),
                " (not part of this vision configuration)");
  }

 private:
  const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorView* v = src_.find(name);
    LFM_CHECK(v, "vision weights: missing tensor '", name, "' (expected shape ", shape_str(shape), ") in ",
              src_.origin());
    LFM_CHECK(v->numel() == [&] {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      return n;
    }() && v->cols() == shape.back(),
              "vision weights: tensor '", name, "' has shape ", shape_str(v->shape), ", expected ", shape_str(shape));
    used_.insert(name);
    return *v;
  }
  const TensorSource& src_;
  std::set<std::string> used_;
};

// Row indices of a pixel unshuffle by f over a grid_h × grid_w tile whose rows start at `base`:
// output token (k, j) concatenates rows (f·k + b, f·j + a) for b, then a, in 0 .. f-1 — what
// Lfm2VlMultiModalProjector.pixel_unshuffle's reshapes and permutes amount to.
void unshuffle_rows(int64_t base, int64_t grid_h, int64_t grid_w, int64_t f, std::vector<int32_t>& out) {
  for (int64_t k = 0; k < grid_h / f; ++k)
    for (int64_t j = 0; j < grid_w / f; ++j)
      for (int64_t b = 0; b < f; ++b)
        for (int64_t a = 0; a < f; ++a) out.push_back(static_cast<int32_t>(base + (f * k + b) * grid_w + f * j + a));
}

}  // namespace

VisionModel::VisionModel(VisionConfig cfg, std::shared_ptr<const TensorSource> source, Backend* backend)
    : cfg_(std::move(cfg)), source_(std::move(source)) {
  const int64_t D = cfg_.hidden_size, I = cfg_.intermediate_size;
  const int64_t patch_in = cfg_.num_channels * cfg_.patch_size * cfg_.patch_size;
  const int64_t f2 = cfg_.downsample_factor * cfg_.downsample_factor;
  VisionBinder b(*source_);
  patch_w_ = b.matrix("vision.embeddings.patch_embedding.weight", {D, patch_in});
  patch_b_ = b.vec("vision.embeddings.patch_embedding.bias", {D});
  pos_table_ = b.vec("vision.embeddings.position_embedding.weight", {cfg_.num_patches, D});
  for (int64_t i = 0; i < cfg_.n_layers; ++i) {
    const std::string p = "vision.encoder.layers." + std::to_string(i) + ".";
    VisionLayerWeights l;
    l.ln1_w = b.vec(p + "layer_norm1.weight", {D});
    l.ln1_b = b.vec(p + "layer_norm1.bias", {D});
    l.ln2_w = b.vec(p + "layer_norm2.weight", {D});
    l.ln2_b = b.vec(p + "layer_norm2.bias", {D});
    l.q = b.matrix(p + "self_attn.q_proj.weight", {D, D});
    l.k = b.matrix(p + "self_attn.k_proj.weight", {D, D});
    l.v = b.matrix(p + "self_attn.v_proj.weight", {D, D});
    l.out = b.matrix(p + "self_attn.out_proj.weight", {D, D});
    l.q_b = b.vec(p + "self_attn.q_proj.bias", {D});
    l.k_b = b.vec(p + "self_attn.k_proj.bias", {D});
    l.v_b = b.vec(p + "self_attn.v_proj.bias", {D});
    l.out_b = b.vec(p + "self_attn.out_proj.bias", {D});
    l.fc1 = b.matrix(p + "mlp.fc1.weight", {I, D});
    l.fc1_b = b.vec(p + "mlp.fc1.bias", {I});
    l.fc2 = b.matrix(p + "mlp.fc2.weight", {D, I});
    l.fc2_b = b.vec(p + "mlp.fc2.bias", {D});
    layers_.push_back(std::move(l));
  }
  post_ln_w_ = b.vec("vision.post_layernorm.weight", {D});
  post_ln_b_ = b.vec("vision.post_layernorm.bias", {D});
  proj_ln_w_ = b.optional_vec(cfg_.projector_layernorm, "projector.layer_norm.weight", {f2 * D});
  proj_ln_b_ = b.optional_vec(cfg_.projector_layernorm, "projector.layer_norm.bias", {f2 * D});
  proj1_ = b.matrix("projector.linear_1.weight", {cfg_.projector_hidden_size, f2 * D});
  proj1_b_ = b.optional_vec(cfg_.projector_bias, "projector.linear_1.bias", {cfg_.projector_hidden_size});
  proj2_ = b.matrix("projector.linear_2.weight", {cfg_.text_hidden_size, cfg_.projector_hidden_size});
  proj2_b_ = b.optional_vec(cfg_.projector_bias, "projector.linear_2.bias", {cfg_.text_hidden_size});
  b.check_no_extra();

  WeightSet set;
  set.matrices.push_back(&patch_w_);
  set.matrices.push_back(&proj1_);
  set.matrices.push_back(&proj2_);
  for (WeightVector* v : {&patch_b_, &post_ln_w_, &post_ln_b_, &proj_ln_w_, &proj_ln_b_, &proj1_b_, &proj2_b_})
    if (!v->empty()) set.vectors.push_back(v);
  for (VisionLayerWeights& l : layers_) {
    for (TensorView* t : {&l.q, &l.k, &l.v, &l.out, &l.fc1, &l.fc2}) set.matrices.push_back(t);
    for (WeightVector* v : {&l.ln1_w, &l.ln1_b, &l.ln2_w, &l.ln2_b, &l.q_b, &l.k_b, &l.v_b, &l.out_b, &l.fc1_b,
                            &l.fc2_b})
      set.vectors.push_back(v);
  }
  const TensorSource* src = source_.get();
  set.release_original = [src](const TensorView& t) { src->drop_pages(t); };
  prepared_ = backend ? backend->prepare_weights(set) : prepare_cpu_weights(set);
}

int64_t VisionModel::tokens_for(int64_t grid_h, int64_t grid_w) const {
  return (grid_h / cfg_.downsample_factor) * (grid_w / cfg_.downsample_factor);
}

size_t VisionModel::weight_bytes() const {
  size_t n = 0;
  for (const auto& name : source_->names()) n += source_->find(name)->nbytes;
  return n;
}

std::vector<float> VisionModel::position_embeddings(int64_t grid_h, int64_t grid_w) const {
  {
    std::lock_guard lock(pos_mu_);
    if (auto it = pos_cache_.find({grid_h, grid_w}); it != pos_cache_.end()) return it->second;
  }
  const int64_t D = cfg_.hidden_size, g = cfg_.position_grid();
  // [g·g, D] → planar [D][g][g], resized per plane to [D][grid_h][grid_w], back to [grid_h·grid_w, D].
  std::vector<float> planar(static_cast<size_t>(D * g * g)), resized(static_cast<size_t>(D * grid_h * grid_w));
  for (int64_t p = 0; p < g * g; ++p)
    for (int64_t d = 0; d < D; ++d) planar[static_cast<size_t>(d * g * g + p)] = pos_table_[static_cast<size_t>(p * D + d)];
  image::resize_bilinear_antialias(planar.data(), static_cast<int>(D), static_cast<int>(g), static_cast<int>(g),
                                   resized.data(), static_cast<int>(grid_h), static_cast<int>(grid_w));
  std::vector<float> out(static_cast<size_t>(grid_h * grid_w * D));
  for (int64_t p = 0; p < grid_h * grid_w; ++p)
    for (int64_t d = 0; d < D; ++d)
      out[static_cast<size_t>(p * D + d)] = resized[static_cast<size_t>(d * grid_h * grid_w + p)];
  std::lock_guard lock(pos_mu_);
  if (pos_cache_.size() < 64) pos_cache_.emplace(std::pair{grid_h, grid_w}, out);
  return out;
}

std::vector<std::vector<float>> VisionModel::encode(Backend& be, std::span<const VisionTile> tiles,
                                                    const ActivationObserver& observer) const {
  if (tiles.empty()) return {};
  VisionEncoding enc(*this, be, std::vector<VisionTile>(tiles.begin(), tiles.end()), observer);
  while (!enc.done()) enc.run_stage();
  return enc.take();
}

VisionEncoding::VisionEncoding(const VisionModel& model, Backend& be, std::vector<VisionTile> tiles,
                               ActivationObserver observer)
    : model_(model), be_(be), tiles_(std::move(tiles)), observer_(std::move(observer)) {
  const VisionConfig& c = model_.cfg_;
  const int64_t f = c.downsample_factor, patch_in = c.num_channels * c.patch_size * c.patch_size;
  LFM_CHECK(!tiles_.empty(), "vision: nothing to encode (no tiles)");
  seg_.push_back(0);
  for (const VisionTile& t : tiles_) {
    LFM_CHECK(t.grid_h > 0 && t.grid_w > 0 && t.grid_h % f == 0 && t.grid_w % f == 0, "vision: a tile of ",
              t.grid_h, "x", t.grid_w, " patches is not a positive multiple of the downsample factor ", f);
    LFM_CHECK(static_cast<int64_t>(t.patches.size()) == t.grid_h * t.grid_w * patch_in, "vision: a tile of ",
              t.grid_h, "x", t.grid_w, " patches has ", t.patches.size(), " values, expected ",
              t.grid_h * t.grid_w * patch_in);
    unshuffle_rows(seg_.back(), t.grid_h, t.grid_w, f, unshuffle_);
    seg_.push_back(seg_.back() + t.grid_h * t.grid_w);
  }
  const int64_t T = seg_.back(), D = c.hidden_size;
  auto buffer = [&](int64_t n) { return be_.allocate(static_cast<size_t>(n) * sizeof(float)); };
  x_buf_ = buffer(T * std::max(patch_in, D));
  h_buf_ = buffer(T * D);
  a_buf_ = buffer(T * D);
  q_buf_ = buffer(T * D);
  k_buf_ = buffer(T * D);
  v_buf_ = buffer(T * D);
  o_buf_ = buffer(T * D);
  f_buf_ = buffer(T * c.intermediate_size);
}

void VisionEncoding::observe(const std::string& name, const float* data, int64_t rows, int64_t cols) {
  if (!observer_) return;
  if (!be_.host_memory()) {
    host_obs_.resize(static_cast<size_t>(rows * cols));
    be_.download(host_obs_.data(), data, host_obs_.size() * sizeof(float));
    data = host_obs_.data();
  }
  observer_(name, data, rows, cols);
}

void VisionEncoding::run_stage() {
  if (done()) return;
  const VisionConfig& c = model_.cfg_;
  Backend& be = be_;
  const int64_t D = c.hidden_size, I = c.intermediate_size, H = c.n_heads, hd = c.head_dim();
  const int64_t f = c.downsample_factor, patch_in = c.num_channels * c.patch_size * c.patch_size;
  const int64_t dt = c.text_hidden_size, P = c.projector_hidden_size;
  const int64_t T = seg_.back(), T_out = static_cast<int64_t>(unshuffle_.size()) / (f * f);
  const int64_t layers = static_cast<int64_t>(model_.layers_.size());
  float *x = x_buf_.as<float>(), *h = h_buf_.as<float>(), *a = a_buf_.as<float>(), *q = q_buf_.as<float>(),
        *k = k_buf_.as<float>(), *v = v_buf_.as<float>(), *o = o_buf_.as<float>(), *ff = f_buf_.as<float>();
  const float eps = static_cast<float>(c.layer_norm_eps);
  const int64_t stage = next_;

  if (stage == 0) {  // patch embedding plus each tile's resized position embeddings
    for (size_t t = 0; t < tiles_.size(); ++t)
      be.upload(x + seg_[t] * patch_in, tiles_[t].patches.data(), tiles_[t].patches.size() * sizeof(float));
    be.matmul(x, T, model_.patch_w_, h);
    be.add_bias(h, model_.patch_b_.ptr(), T, D);
    for (size_t t = 0; t < tiles_.size(); ++t) {
      const std::vector<float> pos = model_.position_embeddings(tiles_[t].grid_h, tiles_[t].grid_w);
      be.upload(x + seg_[t] * D, pos.data(), pos.size() * sizeof(float));
    }
    be.add(h, x, T * D);
    observe("vision.embeddings", h, T, D);
  } else if (stage <= layers) {
    const VisionLayerWeights& l = model_.layers_[static_cast<size_t>(stage - 1)];
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // h = h + out_proj(attention(LN1(h)))
    be.layer_norm(h, l.ln1_w.ptr(), l.ln1_b.ptr(), T, D, eps, a);
    const TensorView* qkv[] = {&l.q, &l.k, &l.v};
    float* const ys[] = {q, k, v};
    be.matmul_shared(a, T, qkv, ys);
    be.add_bias(q, l.q_b.ptr(), T, D);
    be.add_bias(k, l.k_b.ptr(), T, D);
    be.add_bias(v, l.v_b.ptr(), T, D);
    be.segment_attention(q, k, v, SegmentAttention{seg_, {}, H, H, hd, scale, false}, a);
    be.matmul(a, T, l.out, o);
    be.add_bias(o, l.out_b.ptr(), T, D);
    be.add(h, o, T * D);
    // h = h + fc2(GELU(fc1(LN2(h))))
    be.layer_norm(h, l.ln2_w.ptr(), l.ln2_b.ptr(), T, D, eps, a);
    be.matmul(a, T, l.fc1, ff);
    be.add_bias(ff, l.fc1_b.ptr(), T, I);
    be.gelu(ff, T * I, c.gelu_tanh, ff);
    be.matmul(ff, T, l.fc2, o);
    be.add_bias(o, l.fc2_b.ptr(), T, D);
    be.add(h, o, T * D);
    observe("vision.layers." + std::to_string(stage - 1), h, T, D);
  } else {
    be.layer_norm(h, model_.post_ln_w_.ptr(), model_.post_ln_b_.ptr(), T, D, eps, h);
    observe("vision.post_layernorm", h, T, D);
    // Projector over every tile's unshuffled tokens at once: [T_out, f²·D] → [T_out, d_text].
    DeviceBuffer idx_buf = be.allocate(unshuffle_.size() * sizeof(int32_t));
    be.upload(idx_buf.data(), unshuffle_.data(), unshuffle_.size() * sizeof(int32_t));
    DeviceBuffer g_buf = be.allocate(static_cast<size_t>(T_out * f * f * D) * sizeof(float));
    DeviceBuffer p_buf = be.allocate(static_cast<size_t>(T_out * P) * sizeof(float));
    DeviceBuffer e_buf = be.allocate(static_cast<size_t>(T_out * dt) * sizeof(float));
    float *g = g_buf.as<float>(), *p = p_buf.as<float>(), *e = e_buf.as<float>();
    be.gather_rows(h, D, idx_buf.as<int32_t>(), T_out * f * f, g);
    if (c.projector_layernorm)
      be.layer_norm(g, model_.proj_ln_w_.ptr(), model_.proj_ln_b_.ptr(), T_out, f * f * D, 1e-5f, g);
    be.matmul(g, T_out, model_.proj1_, p);
    if (!model_.proj1_b_.empty()) be.add_bias(p, model_.proj1_b_.ptr(), T_out, P);
    be.gelu(p, T_out * P, c.projector_gelu_tanh, p);
    be.matmul(p, T_out, model_.proj2_, e);
    if (!model_.proj2_b_.empty()) be.add_bias(e, model_.proj2_b_.ptr(), T_out, dt);
    observe("projector", e, T_out, dt);
    int64_t row = 0;
    for (const VisionTile& t : tiles_) {
      const int64_t n = model_.tokens_for(t.grid_h, t.grid_w);
      out_.emplace_back(static_cast<size_t>(n * dt));
      be.download(out_.back().data(), e + row * dt, out_.back().size() * sizeof(float));
      row += n;
    }
    // The activations are of no more use: give their memory back now.
    for (DeviceBuffer* b : {&x_buf_, &h_buf_, &a_buf_, &q_buf_, &k_buf_, &v_buf_, &o_buf_, &f_buf_}) *b = DeviceBuffer();
  }
  ++next_;
}

std::vector<std::vector<float>> VisionEncoding::take() {
  LFM_CHECK(done(), "vision: the encoding's results were asked for after ", next_, " of its ", stages(), " stages");
  return std::move(out_);
}

}  // namespace lfm
