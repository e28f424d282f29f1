// Detokenizer's internals shared by decode() (model/detokenizer.cpp) and DetokenizerStreams
// (model/detokenizer_streams.cpp): the loaded weights and one batched step of several streams.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "audio/istft.h"
#include "formats/tensor_source.h"
#include "kernels/weight_set.h"
#include "model/detokenizer.h"
#include "model/forward.h"

namespace lfm {

struct Detokenizer::Impl {
  std::shared_ptr<const TensorSource> base;  // the folder's tensors (emb, lin, istft read from it)
  std::unique_ptr<Model> lfm;                // the LFM2 stack (lfm.* as model.*), tied "head" unused
  TensorView emb;                            // [8 · 2048, d] as stored (rows decoded on the host)
  TensorView lin;                            // [1282, d], prepared by the backend
  WeightVector lin_bias;                     // [1282]
  std::vector<float> window;                 // [1280] istft.window
  std::unique_ptr<PreparedWeights> prepared;  // lin's and lin_bias's copies
  const Backend* prepared_for = nullptr;

  // Checks codes [n, 8] (a multiple of 8 values, each in [0, 2048)); returns n.
  static int64_t check_codes(std::span<const int32_t> codes, const char* who);
  // Rows [6 · frames, d]: each frame's codebook mean, repeated 6 times.
  void upsampled_rows(std::span<const int32_t> codes, float* out) const;
  // Checks that `be` can run the weights (they were prepared for it, or for the CPU and it is one).
  void check_backend(const Backend& be, const char* who) const;

  // One stream's share of a step.
  struct Item {
    Sequence* seq;
    InverseStft* istft;
    std::span<const int32_t> codes;  // [n, 8], n > 0
    std::vector<float>* samples;     // appended to
  };
  // Scratch of the lin matmul in the backend's memory, reused between steps.
  struct Buffers {
    DeviceBuffer in, out;
    std::vector<float> rows, spectrum;  // host: upsampled rows, lin output
  };
  // One Forward step over every item's new rows (as embeddings), lin, then each item's iSTFT.
  // `trace` (decode only) gets the rows, hidden rows and spectrum appended.
  void step(Backend& be, Forward& fwd, Buffers& buf, std::span<const Item> items, Trace* trace) const;
};

// The state cache of `streams` sequences of up to `rows` rows each (float32 K/V and conv states).
std::unique_ptr<StateCache> make_detokenizer_cache(const Model& lfm, Backend& be, int64_t streams, int64_t rows);

}  // namespace lfm
