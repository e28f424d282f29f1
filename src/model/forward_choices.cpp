// The end of a step: what comes down from the logits. Greedy ids for argmax_only items, a
// shortlist of candidates for sampled items, whole rows for the rest; a host-memory backend
// leaves every row in StepOutput::logits, a device backend downloads only what is asked for.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "model/forward.h"

namespace lfm {

std::span<const Candidate> StepOutput::shortlist(size_t item) const {
  const auto n = static_cast<size_t>(shortlist_size);
  return std::span<const Candidate>(candidates).subspan(static_cast<size_t>(shortlist_of[item]) * n, n);
}

void Forward::set_shortlist_size(int64_t n) {
  LFM_CHECK(n >= 1 && n <= kShortlist, "forward: a shortlist holds 1 to ", kShortlist, " candidates, got ", n);
  shortlist_size_ = n;
}

// `logits` [R, vocab] in backend memory, rows in item order (out.first_row / n_rows).
void Forward::download_choices(std::span<const BatchItem> items, float* logits, int64_t R, StepOutput& out) {
  const int64_t V = model_.config().vocab_size;
  std::vector<int32_t> keep;  // rows whose logits the host needs
  bool any_argmax = false;
  out.logits_row.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    out.logits_row[i] = out.first_row[i] + out.n_rows[i] - 1;
    if (items[i].argmax_only || items[i].shortlist) {
      LFM_CHECK(!items[i].all_logits, "forward: an item cannot want every row's logits and only a greedy id or shortlist");
      LFM_CHECK(!(items[i].argmax_only && items[i].shortlist), "forward: an item wants both a greedy id and a shortlist");
      any_argmax = any_argmax || items[i].argmax_only;
    } else {
      for (int64_t r = 0; r < out.n_rows[i]; ++r) keep.push_back(static_cast<int32_t>(out.first_row[i] + r));
    }
  }
  const uint8_t* allowed = has_allowed_ ? allowed_buf_.as<uint8_t>() : nullptr;
  if (any_argmax) {
    // Every computed row's argmax (one row per argmax_only item; cheap beside the head's matmul).
    int32_t* ids = scratch<int32_t>(argmax_buf_, R);
    be_.argmax_rows(logits, R, V, allowed, ids);
    std::vector<int32_t> host_ids(static_cast<size_t>(R));
    be_.download(host_ids.data(), ids, host_ids.size() * sizeof(int32_t));
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].argmax_only) {
        out.argmax[i] = host_ids[static_cast<size_t>(out.first_row[i])];
        LFM_CHECK(out.argmax[i] >= 0, "forward: no token is allowed");
      }
  }
  download_shortlists(items, logits, out);
  if (be_.host_memory()) return;  // out.logits already holds every row
  if (static_cast<int64_t>(keep.size()) == R) {
    be_.download(out.logits.data(), logits, out.logits.size() * sizeof(float));
    return;
  }
  // Only the kept rows, gathered, renumbered.
  out.logits.resize(keep.size() * static_cast<size_t>(V));
  int64_t next = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].argmax_only || items[i].shortlist) {
      out.first_row[i] = -1;
      out.n_rows[i] = 0;
    } else {
      out.first_row[i] = next;
      next += out.n_rows[i];
    }
  }
  if (keep.empty()) return;
  const int64_t K = static_cast<int64_t>(keep.size());
  int32_t* keep_dev = scratch<int32_t>(keep_buf_, K);
  be_.upload(keep_dev, keep.data(), keep.size() * sizeof(int32_t));
  float* kept = scratch<float>(kept_buf_, K * V);
  be_.gather_rows(logits, V, keep_dev, K, kept);
  be_.download(out.logits.data(), kept, out.logits.size() * sizeof(float));
}

// The shortlisted items' edits applied in place, then their rows' candidates, tails and (where
// asked for) logsumexps down in one transfer.
void Forward::download_shortlists(std::span<const BatchItem> items, float* logits, StepOutput& out) {
  const int64_t V = model_.config().vocab_size;
  std::vector<LogitEdit> edits;
  std::vector<CandidateRow> rows;
  std::vector<int32_t> lse_rows;  // the rows whose logsumexp is asked for
  std::vector<size_t> lse_of;     // and their indices among the shortlisted
  out.shortlist_of.assign(items.size(), -1);
  for (size_t i = 0; i < items.size(); ++i) {
    const ShortlistRequest* s = items[i].shortlist;
    if (!s) continue;
    const auto row = static_cast<int32_t>(out.logits_row[i]);
    out.shortlist_of[i] = static_cast<int64_t>(rows.size());
    if (s->logsumexp) {
      lse_rows.push_back(row);
      lse_of.push_back(rows.size());
    }
    rows.push_back({row, s->temperature});
    for (LogitEdit e : s->edits) {
      LFM_CHECK(e.id >= 0 && e.id < V, "forward: a logit edit names id ", e.id, " outside the vocabulary of ", V);
      e.row = row;
      edits.push_back(e);
    }
  }
  const auto count = static_cast<int64_t>(rows.size());
  const int64_t n = shortlist_size_;
  out.shortlist_size = n;
  out.candidates.resize(static_cast<size_t>(count * n));
  out.tails.resize(static_cast<size_t>(count));
  out.logsumexps.assign(static_cast<size_t>(count), std::numeric_limits<double>::quiet_NaN());
  if (count == 0) return;
  // What comes down, in one download: candidates [count, n] | tails [count] | logsumexps.
  const size_t best_bytes = static_cast<size_t>(count * n) * sizeof(Candidate);
  const size_t tails_bytes = (static_cast<size_t>(count) * sizeof(float) + 7) / 8 * 8;
  const size_t lse_bytes = lse_rows.size() * sizeof(double);
  uint8_t* down = scratch<uint8_t>(shortlist_out_buf_, static_cast<int64_t>(best_bytes + tails_bytes + lse_bytes));
  auto* best = reinterpret_cast<Candidate*>(down);
  auto* tails = reinterpret_cast<float*>(down + best_bytes);
  auto* lse = reinterpret_cast<double*>(down + best_bytes + tails_bytes);
  // The logsumexps first: they are of the raw rows, before the edits.
  if (!lse_rows.empty()) {
    const auto n_lse = static_cast<int64_t>(lse_rows.size());
    int32_t* lse_rows_dev = scratch<int32_t>(lse_rows_buf_, n_lse);
    be_.upload(lse_rows_dev, lse_rows.data(), lse_rows.size() * sizeof(int32_t));
    be_.logsumexp_rows(logits, V, lse_rows_dev, n_lse, lse);
  }
  if (!edits.empty()) {
    // Padded to a power of two (at least 64): the count, an argument of the step's ops, then
    // stays the same for many steps while penalised requests' edits grow by one a token.
    edits.resize(std::bit_ceil(std::max<size_t>(edits.size(), 64)), LogitEdit{0, kPaddingEdit});
    const auto n_edits = static_cast<int64_t>(edits.size());
    LogitEdit* dev = scratch<LogitEdit>(edits_buf_, n_edits);
    be_.upload(dev, edits.data(), edits.size() * sizeof(LogitEdit));
    be_.edit_logits(logits, V, dev, n_edits);
  }
  CandidateRow* rows_dev = scratch<CandidateRow>(candidate_rows_buf_, count);
  be_.upload(rows_dev, rows.data(), rows.size() * sizeof(CandidateRow));
  be_.top_candidates(logits, V, rows_dev, count, has_allowed_ ? allowed_buf_.as<uint8_t>() : nullptr, n, best, tails);
  shortlist_host_.resize(best_bytes + tails_bytes + lse_bytes);
  be_.download(shortlist_host_.data(), down, shortlist_host_.size());
  std::memcpy(out.candidates.data(), shortlist_host_.data(), best_bytes);
  std::memcpy(out.tails.data(), shortlist_host_.data() + best_bytes, out.tails.size() * sizeof(float));
  for (size_t k = 0; k < lse_rows.size(); ++k)
    std::memcpy(&out.logsumexps[lse_of[k]], shortlist_host_.data() + best_bytes + tails_bytes + k * sizeof(double),
                sizeof(double));
}

void Forward::fetch_row(const StepOutput& out, size_t item, float* dst) {
  const int64_t V = model_.config().vocab_size;
  LFM_CHECK(item < out.logits_row.size() && step_logits_, "forward: fetch_row of item ", item, " of no step");
  const float* row = step_logits_ + out.logits_row[item] * V;
  if (be_.host_memory())
    std::memcpy(dst, row, static_cast<size_t>(V) * sizeof(float));
  else
    be_.download(dst, row, static_cast<size_t>(V) * sizeof(float));
}

}  // namespace lfm
