// The reference of the sampling ops (Backend::edit_logits, top_candidates, logsumexp_rows): what a
// device computes in place so that a sampled row comes down as a few candidates.
#include <vector>

#include "core/error.h"
#include "kernels/reference_backend.h"
#include "kernels/top_candidates.h"

namespace lfm {

void ReferenceBackend::edit_logits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const LogitEdit& e = edits[i];
    if (e.id == kPaddingEdit) continue;
    LFM_CHECK(e.id >= 0 && e.id < vocab && e.row >= 0, "edit_logits: edit ", i, " names row ", e.row, " id ", e.id,
              " (vocabulary ", vocab, ")");
    float& w = logits[static_cast<int64_t>(e.row) * vocab + e.id];
    w += e.add;
    if (e.penalty != 1.0f) w = w > 0 ? w / e.penalty : w * e.penalty;
    w -= e.sub;
  }
}

void ReferenceBackend::top_candidates(const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                                      const uint8_t* allowed, int64_t n, Candidate* best, float* tail) {
  LFM_CHECK(n >= 1 && n <= kMaxCandidates, "top_candidates: n must be in [1, ", kMaxCandidates, "], got ", n);
  std::vector<Candidate>& scratch = candidate_scratch_;
  for (int64_t r = 0; r < count; ++r)
    tail[r] = select_top_candidates(
        logits + static_cast<int64_t>(rows[r].row) * vocab, vocab, [&](int64_t i) { return !allowed || allowed[i]; }, n,
        rows[r].temperature, best + r * n, scratch);
}

void ReferenceBackend::logsumexp_rows(const float* logits, int64_t vocab, const int32_t* rows, int64_t count,
                                      double* out) {
  for (int64_t r = 0; r < count; ++r) {
    LFM_CHECK(rows[r] >= 0, "logsumexp_rows: row ", rows[r]);
    out[r] = row_logsumexp(logits + static_cast<int64_t>(rows[r]) * vocab, vocab);
  }
}

}  // namespace lfm
