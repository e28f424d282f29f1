// Plain types of the sampling ops (Backend::edit_logits, Backend::top_candidates), shared by the
// backends and the CUDA kernels.
#pragma once

#include <cstdint>

namespace lfm {

// The most candidates a row is summarised by (the CUDA kernel's sort size).
constexpr int64_t kMaxCandidates = 256;

// A LogitEdit's id that makes it do nothing (padding).
constexpr int32_t kPaddingEdit = -1;

struct LogitEdit {
  int32_t row = 0, id = 0;
  float add = 0.0f, penalty = 1.0f, sub = 0.0f;
};
struct CandidateRow {
  int32_t row = 0;           // a row of the logits
  float temperature = 0.0f;  // for the tail's sum; 0: no tail
};
struct Candidate {
  float value = 0.0f;
  int32_t id = -1;
};

}  // namespace lfm
