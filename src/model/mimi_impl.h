// MimiDecoder's internals shared by loading (model/mimi_load.cpp), the batched step
// (model/mimi_step.cpp) and decode()/streams (model/mimi_streams.cpp). Every weight is float32,
// owned here; the matrices are prepared for the CPU kernels once at load.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/weight_set.h"
#include "model/mimi.h"

namespace lfm {

// A causal Conv1d with stride 1 (MimiConv1d: zero padding of (kernel − 1)·dilation on the left,
// none on the right, so T inputs give T outputs).
struct MimiConv {
  int64_t in = 0, out = 0, kernel = 0, dilation = 1;
  TensorView w;      // [out, kernel · in]: column j · in + c is torch's weight[o, c, j] (tap-major, so
                     // an im2col row is `kernel` input rows one after another)
  WeightVector bias;  // [out]
  int64_t context() const { return (kernel - 1) * dilation; }  // past input rows an output reads
};

// A causal ConvTranspose1d (MimiConvTranspose1d, trim_right_ratio 1: the last kernel − stride
// outputs trimmed), kernel = 2 · stride here: T inputs give T · stride final outputs, and the
// kernel − stride outputs after them hold partial sums until the next inputs come.
struct MimiConvTr {
  int64_t in = 0, out = 0, kernel = 0, stride = 0;
  bool depthwise = false;  // groups = channels (the upsample): taps [in, kernel] in `taps`
  TensorView w;            // [kernel · out, in]: row j · out + o is torch's weight[c, o, j]
  std::vector<float> taps;  // depthwise: [in, kernel]
  WeightVector bias;        // [out] or empty (no bias)
  int64_t tail() const { return kernel - stride; }
};

struct MimiLayer {
  WeightVector ln1_w, ln1_b, ln2_w, ln2_b, attn_scale, mlp_scale;  // [512]
  TensorView q, k, v, o, fc1, fc2;  // [H·hd, 512], [KV·hd, 512] ×2, [512, H·hd], [2048, 512], [512, 2048]
};

// One stream's carried state: whatever the next frames' outputs read of the past.
struct MimiState {
  int64_t frames = 0, position = 0;  // frames taken; transformer rows so far
  std::vector<float> up_tail;        // upsample's partial sums [tail, 512]
  std::vector<std::vector<float>> keys, values;  // per layer, the last rows [n, KV · hd] within the window
  std::vector<std::vector<float>> conv_ctx;      // per SEANet conv, its last context() inputs [ctx, in]
  std::vector<std::vector<float>> tr_tail;       // per SEANet transposed conv, [tail, out] partial sums
};

// Rows of every stream of a step, one after another: n[i] rows of `width` values for stream i.
struct MimiRows {
  std::vector<float> v;
  std::vector<int64_t> n;
  int64_t width = 0;
  int64_t total() const {
    int64_t t = 0;
    for (int64_t k : n) t += k;
    return t;
  }
};

// A caller's buffers for its steps, reused so that a stream's steps allocate (and fault in) their
// megabytes of activations once, not per step.
struct MimiScratch {
  MimiRows x, u, a, b, c;
  std::vector<float> col, prod, ext, acc, sem, ac, tmp, h, q, k, v, att, o, mid, keys, values, w;
};

struct MimiDecoder::Impl {
  MimiConfig cfg;
  std::deque<std::vector<float>> store;  // the matrices' float32 values (views point into them)
  std::vector<std::vector<float>> codebooks;  // [8][2048 · 256]: embed_sum / clamp(cluster_usage, 1e-5)
  TensorView semantic_proj, acoustic_proj;  // [512, 256]
  MimiConvTr upsample;
  std::vector<MimiLayer> layers;
  WeightVector inv_freq;  // RoPE [head_dim / 2]
  // SEANet: convs[0] first; per ratio r: trs[r], then its residual blocks' convs (2 each); the
  // last conv. Their order in `convs` is the order they run.
  std::vector<MimiConv> convs;
  std::vector<MimiConvTr> trs;
  std::unique_ptr<PreparedWeights> prepared;
  // A device backend's decoder runs on this CPU backend (made on first use).
  mutable std::mutex cpu_mu;
  mutable std::unique_ptr<ThreadPool> cpu_pool;
  mutable std::unique_ptr<Backend> cpu;

  // The backend to run on: `be` when its memory is the host's, else the CPU one.
  Backend& runner(Backend& be) const;
  // Checks codes [n, 8] (whole frames, each in [0, codebook_size)); returns n.
  int64_t check_codes(std::span<const int32_t> codes, const char* who) const;
  MimiState new_state() const;

  struct Item {
    MimiState* state;
    std::span<const int32_t> codes;  // [n, 8], n > 0
    std::vector<float>* samples;     // appended: n · 1920 final samples
  };
  // One batched step of several streams (rows of every stream in each matmul; a row's values do
  // not depend on the others on a bitwise batch-invariant backend).
  void step(Backend& be, std::span<const Item> items, MimiScratch& scratch, Trace* trace) const;
};

}  // namespace lfm
