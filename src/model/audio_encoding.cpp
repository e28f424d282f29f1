// AudioModel::encode and AudioEncoding: the FastConformer and the adapter over every clip of a
// call packed into one batch of rows (the convs and the attention stay inside each clip), in
// stages: the ×8 subsampling, each block, then the adapter and the download.
// docs/design/audio_input_research.md §3–§4.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/audio_model.h"
#include "model/audio_weights.h"

namespace lfm {

namespace {

// Rows of a stride-2, kernel-3, pad-1 conv over t rows: ceil(t / 2).
int64_t halved(int64_t t) { return (t - 1) / 2 + 1; }

// The relative positional encoding (transformers' ParakeetEncoderRelPositionalEncoding, NeMo's
// RelPositionalEncoding) [2·P0 + 1, d]: row m is relative position r = P0 − m,
// pe[m, 2i] = sin(r·ω_i), pe[m, 2i + 1] = cos(r·ω_i), ω_i = exp(2i · −ln(10000)/d), all in
// float32 as transformers computes them.
std::vector<float> relative_positions(int64_t p0, int64_t d) {
  std::vector<float> omega(static_cast<size_t>(d / 2));
  const float step = static_cast<float>(-std::log(10000.0) / static_cast<double>(d));
  for (int64_t i = 0; i < d / 2; ++i) omega[static_cast<size_t>(i)] = std::exp(static_cast<float>(2 * i) * step);
  std::vector<float> pe(static_cast<size_t>((2 * p0 + 1) * d));
  for (int64_t m = 0; m <= 2 * p0; ++m) {
    const float r = static_cast<float>(p0 - m);
    for (int64_t i = 0; i < d / 2; ++i) {
      const float angle = r * omega[static_cast<size_t>(i)];
      pe[static_cast<size_t>(m * d + 2 * i)] = std::sin(angle);
      pe[static_cast<size_t>(m * d + 2 * i + 1)] = std::cos(angle);
    }
  }
  return pe;
}

}  // namespace

// The packed activations between stages, in the backend's memory.
struct AudioEncoding::Buffers {
  std::vector<int64_t> seg;  // clip c's encoder rows (= audio tokens): [seg[c], seg[c + 1])
  int64_t p0 = 0;            // the position table's reach: the longest clip's rows − 1
  DeviceBuffer x, a, q, k, v, att, o, f, pos, p;
};

std::vector<std::vector<float>> AudioModel::encode(Backend& be, std::span<const AudioClip> clips,
                                                   const ActivationObserver& observer) const {
  if (clips.empty()) return {};
  AudioEncoding enc(*this, be, std::vector<AudioClip>(clips.begin(), clips.end()), observer);
  while (!enc.done()) enc.run_stage();
  return enc.take();
}

AudioEncoding::AudioEncoding(const AudioModel& model, Backend& be, std::vector<AudioClip> clips,
                             ActivationObserver observer)
    : model_(model),
      be_(be),
      clips_(std::move(clips)),
      observer_(std::move(observer)),
      buf_(std::make_unique<Buffers>()) {
  const AudioConfig& c = model_.cfg_;
  LFM_CHECK(!clips_.empty(), "audio: nothing to encode (no clips)");
  Buffers& b = *buf_;
  b.seg = {0};
  int64_t longest = 0;
  for (size_t i = 0; i < clips_.size(); ++i) {
    const AudioClip& clip = clips_[i];
    LFM_CHECK(clip.frames > 0, "audio: clip ", i, " has ", clip.frames, " feature frames (at least 1)");
    const int64_t n = model_.tokens_for(clip.frames);  // checked first: frames · mel bins stays small
    LFM_CHECK(n <= c.max_position_embeddings, "audio: clip ", i, " of ", clip.frames, " frames makes ", n,
              " encoder rows, more than the encoder's ", c.max_position_embeddings, " positions (",
              c.max_position_embeddings * c.subsampling_factor * c.front_end.hop_length / c.front_end.sample_rate,
              " s of audio)");
    LFM_CHECK(static_cast<int64_t>(clip.features.size()) == clip.frames * c.num_mel_bins, "audio: clip ", i, " of ",
              clip.frames, " frames has ", clip.features.size(), " feature values, expected ",
              clip.frames * c.num_mel_bins, " (", c.num_mel_bins, " mel bins a frame)");
    b.seg.push_back(b.seg.back() + n);
    longest = std::max(longest, n);
  }
  b.p0 = longest - 1;
  const int64_t N = b.seg.back(), d = c.hidden_size;
  auto buffer = [&](int64_t n) { return be_.allocate(static_cast<size_t>(n) * sizeof(float)); };
  b.x = buffer(N * d);
  b.a = buffer(N * d);
  b.q = buffer(N * d);
  b.k = buffer(N * d);
  b.v = buffer(N * d);
  b.att = buffer(N * d);
  b.o = buffer(N * d);
  b.f = buffer(N * std::max(c.intermediate_size, 2 * d));
  b.pos = buffer((2 * b.p0 + 1) * d);
  b.p = buffer((2 * b.p0 + 1) * d);
}

AudioEncoding::~AudioEncoding() = default;

int64_t AudioEncoding::stages() const { return model_.cfg_.n_layers + 2; }

void AudioEncoding::run_stage() {
  if (done()) return;
  const AudioConfig& c = model_.cfg_;
  const AudioModel::Weights& w = *model_.w_;
  Backend& be = be_;
  Buffers& b = *buf_;
  const int64_t d = c.hidden_size, I = c.intermediate_size, H = c.n_heads, dh = c.head_dim();
  const int64_t C = c.subsampling_channels, F = c.num_mel_bins, D = c.text_hidden_size;
  const int64_t N = b.seg.back(), M = 2 * b.p0 + 1;
  const float eps = static_cast<float>(c.layer_norm_eps);
  float *x = b.x.as<float>(), *a = b.a.as<float>(), *f = b.f.as<float>(), *o = b.o.as<float>();
  std::vector<float> host;  // what the observer sees where the backend's memory is not the host's
  auto observe = [&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
    if (!observer_) return;
    if (!be.host_memory()) {
      host.resize(static_cast<size_t>(rows * cols));
      be.download(host.data(), data, host.size() * sizeof(float));
      data = host.data();
    }
    observer_(name, data, rows, cols);
  };
  const int64_t stage = next_;

  if (stage == 0) {
    // ×8 subsampling, channels last: features [T, F, 1] → [T1, F/2, C] → [T2, F/4, C] → [n, F/8, C]
    // → [n, d], one clip at a time so that the largest of these (the first) is sized by the
    // longest clip, not by all of them together.
    const int64_t F1 = halved(F), F2 = halved(F1), F3 = halved(F2);
    int64_t longest = 0;
    for (const AudioClip& clip : clips_) longest = std::max(longest, clip.frames);
    const int64_t T1_max = halved(longest), T2_max = halved(T1_max);
    DeviceBuffer in_buf = be.allocate(static_cast<size_t>(longest * F) * sizeof(float));
    DeviceBuffer s_buf = be.allocate(static_cast<size_t>(T1_max * F1 * C) * sizeof(float));
    DeviceBuffer t_buf = be.allocate(static_cast<size_t>(T2_max * F2 * C) * sizeof(float));
    float *in = in_buf.as<float>(), *s = s_buf.as<float>(), *t = t_buf.as<float>();
    for (size_t i = 0; i < clips_.size(); ++i) {
      const int64_t T = clips_[i].frames, T1 = halved(T), T2 = halved(T1), n = b.seg[i + 1] - b.seg[i];
      const int64_t frames[] = {0, T}, rows1[] = {0, T1}, rows2[] = {0, T2};
      be.upload(in, clips_[i].features.data(), clips_[i].features.size() * sizeof(float));
      be.conv2d(in, Conv2d{frames, F, C, false, 3, 2, 1}, w.conv0_w.ptr(), w.conv0_b.ptr(), s);
      be.activation(s, T1 * F1 * C, Activation::kRelu, s);
      be.conv2d(s, Conv2d{rows1, F1, C, true, 3, 2, 1}, w.conv2_w.ptr(), w.conv2_b.ptr(), t);
      be.matmul(t, T2 * F2, w.conv3, s);  // the 1×1 conv
      be.add_bias(s, w.conv3_b.ptr(), T2 * F2, C);
      be.activation(s, T2 * F2 * C, Activation::kRelu, s);
      be.conv2d(s, Conv2d{rows2, F2, C, true, 3, 2, 1}, w.conv5_w.ptr(), w.conv5_b.ptr(), t);
      be.matmul(t, n * F3, w.conv6, s);
      be.add_bias(s, w.conv6_b.ptr(), n * F3, C);
      be.activation(s, n * F3 * C, Activation::kRelu, s);
      be.matmul(s, n, w.linear, x + b.seg[i] * d);  // [n, F/8 · C] → [n, d]
    }
    be.add_bias(x, w.linear_b.ptr(), N, d);
    if (!w.input_scale.empty()) be.mul_rows(x, d, w.input_scale.ptr(), 0, N, d, x, d);
    observe("audio.subsampling", x, N, d);
    // The relative positions every block projects: one table for the longest clip serves all.
    const std::vector<float> pe = relative_positions(b.p0, d);
    be.upload(b.pos.data(), pe.data(), pe.size() * sizeof(float));
  } else if (stage <= c.n_layers) {
    const AudioLayerWeights& l = w.layers[static_cast<size_t>(stage - 1)];
    float *q = b.q.as<float>(), *k = b.k.as<float>(), *v = b.v.as<float>(), *att = b.att.as<float>();
    // x += ½·FFN(LN(x)) (the ½ is in down and down_b)
    auto ffn = [&](const AudioFfnWeights& ff) {
      be.layer_norm(x, ff.norm_w.ptr(), ff.norm_b.ptr(), N, d, eps, a);
      be.matmul(a, N, ff.up, f);
      be.add_bias(f, ff.up_b.ptr(), N, I);
      be.activation(f, N * I, Activation::kSilu, f);
      be.matmul(f, N, ff.down, o);
      be.add_bias(o, ff.down_b.ptr(), N, d);
      be.add(x, o, N * d);
    };
    ffn(l.ff1);
    // x += o_proj(rel_pos_attention(LN(x)))
    be.layer_norm(x, l.att_norm_w.ptr(), l.att_norm_b.ptr(), N, d, eps, a);
    const TensorView* qkv[] = {&l.q, &l.k, &l.v};
    float* const ys[] = {q, k, v};
    be.matmul_shared(a, N, qkv, ys);
    be.add_bias(q, l.q_b.ptr(), N, d);
    be.add_bias(k, l.k_b.ptr(), N, d);
    be.add_bias(v, l.v_b.ptr(), N, d);
    float* p = b.p.as<float>();
    be.matmul(b.pos.as<float>(), M, l.pos, p);
    be.rel_pos_attention(q, k, v, p, l.bias_u.ptr(), l.bias_v.ptr(),
                         RelPosAttention{b.seg, H, dh, b.p0, 1.0f / std::sqrt(static_cast<float>(dh))}, att);
    be.matmul(att, N, l.o, o);
    be.add_bias(o, l.o_b.ptr(), N, d);
    be.add(x, o, N * d);
    // x += pw2(SiLU(BN(depthwise(GLU(pw1(LN(x))))))) with BN folded into the depthwise conv
    be.layer_norm(x, l.conv_norm_w.ptr(), l.conv_norm_b.ptr(), N, d, eps, a);
    be.matmul(a, N, l.pw1, f);
    be.add_bias(f, l.pw1_b.ptr(), N, 2 * d);
    be.glu(f, N, d, att);
    be.segment_conv(att, b.seg, d, c.conv_kernel_size, c.conv_kernel_size / 2, l.dw.ptr(), l.dw_b.ptr(), a);
    be.activation(a, N * d, Activation::kSilu, a);
    be.matmul(a, N, l.pw2, o);
    be.add_bias(o, l.pw2_b.ptr(), N, d);
    be.add(x, o, N * d);
    ffn(l.ff2);
    be.layer_norm(x, l.out_norm_w.ptr(), l.out_norm_b.ptr(), N, d, eps, x);
    observe("audio.layers." + std::to_string(stage - 1), x, N, d);
    if (stage == c.n_layers) observe("audio.encoder", x, N, d);
  } else {
    // The adapter: LayerNorm → Linear → GELU (erf) → Linear, [N, d] → [N, D].
    DeviceBuffer h_buf = be.allocate(static_cast<size_t>(N * D) * sizeof(float));
    DeviceBuffer e_buf = be.allocate(static_cast<size_t>(N * D) * sizeof(float));
    float *h = h_buf.as<float>(), *e = e_buf.as<float>();
    be.layer_norm(x, w.adapter_norm_w.ptr(), w.adapter_norm_b.ptr(), N, d, eps, a);
    be.matmul(a, N, w.adapter1, h);
    be.add_bias(h, w.adapter1_b.ptr(), N, D);
    be.gelu(h, N * D, false, h);
    be.matmul(h, N, w.adapter2, e);
    be.add_bias(e, w.adapter2_b.ptr(), N, D);
    observe("audio.adapter", e, N, D);
    for (size_t i = 0; i < clips_.size(); ++i) {
      out_.emplace_back(static_cast<size_t>((b.seg[i + 1] - b.seg[i]) * D));
      be.download(out_.back().data(), e + b.seg[i] * D, out_.back().size() * sizeof(float));
    }
    // The activations are of no more use: give their memory back now.
    for (DeviceBuffer* buf : {&b.x, &b.a, &b.q, &b.k, &b.v, &b.att, &b.o, &b.f, &b.pos, &b.p}) *buf = DeviceBuffer();
  }
  ++next_;
}

std::vector<std::vector<float>> AudioEncoding::take() {
  LFM_CHECK(done(), "audio: the encoding's results were asked for after ", next_, " of its ", stages(), " stages");
  return std::move(out_);
}

}  // namespace lfm
