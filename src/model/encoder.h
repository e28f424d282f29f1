// A retriever's forward (LFM2.5-Embedding, the ColBERT models): texts in, final-normed hidden
// states out, with no cache and no state kept between calls. Texts are packed back to back as
// one ragged batch, never padded; every op sees each text as its own segment (positions from 0,
// attention and the short conv never cross a text's bounds), so a text's vectors are the same,
// bit for bit, alone or in any batch. The layer stack is the decoder's (model/forward.h) with
// two differences taken from the config:
//   bidirectional ("lfm2_bidirectional"): attention sees the whole text; the short conv is
//     centred (taps K/2 to the left, the rest to the right, zeros past either end);
//   causal ("Lfm2Model", LFM2-ColBERT): causal attention, a causal conv from a zero state.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "model/model.h"

namespace lfm {

struct EncoderText {
  std::span<const int32_t> ids;
  // Attention keys are the first `keys` tokens only (0: all of them). PyLate's query expansion
  // tokens are queries that other tokens do not attend to (attend_to_expansion_tokens false);
  // the short conv still reads them, as in the reference.
  int64_t keys = 0;
};

// Which rows of each text come out: every token, the first (CLS pooling) or the last.
enum class EncoderRows { kAll, kFirst, kLast };

class Encoder {
 public:
  // The model's weights must be prepared for `backend` (LoadOptions::backend) or be CPU ones.
  Encoder(const Model& model, Backend& backend);

  // The wanted rows of every text, text after text, on the host: [rows, d] final-normed hidden
  // states, or with `head` ([out, d], a ColBERT Dense projection prepared for this backend)
  // those rows times headᵀ: [rows, out]. Throws lfm::Error for an empty text, an id outside the
  // vocabulary, a text past the model's positions or bad key counts, before any work.
  void run(std::span<const EncoderText> texts, EncoderRows rows, const TensorView* head, std::vector<float>& out);

  const Model& model() const { return model_; }

 private:
  void conv_mixer(const LayerWeights& lw);
  void attention_mixer(const LayerWeights& lw);

  template <typename T>
  T* scratch(DeviceBuffer& buf, int64_t n) {
    ensure_capacity(be_, buf, static_cast<size_t>(n) * sizeof(T));
    return buf.as<T>();
  }

  const Model& model_;
  Backend& be_;
  int64_t T_ = 0;
  std::vector<int64_t> seg_, key_end_;  // the texts' row bounds; where each text's keys end
  bool limited_keys_ = false;
  const int64_t* positions_ = nullptr;
  float *h_ = nullptr, *a_ = nullptr, *mix_ = nullptr;  // [T, d]
  DeviceBuffer h_buf_, a_buf_, mix_buf_, proj_buf_, tmp_buf_, tmp2_buf_, tmp3_buf_, ids_buf_, positions_buf_;
  DeviceBuffer rows_buf_, out_buf_, gate_buf_, up_buf_;
};

}  // namespace lfm
