// One decoder step over a ragged batch. Each item is one sequence with its own new tokens
// (a whole prompt, a chunk of one, or a single decode token), its own positions (continuing
// from its state) and its own state in the StateCache. Tokens are packed back to back, never
// padded: matmuls see all T tokens at once, and the state ops (K/V write, paged attention, short
// conv) get one run per sequence for the whole step, so nothing crosses between sequences and a
// backend can parallelise over sequences × heads. Forward never touches cache memory itself.
// The one exception to "never padded": a decode step (one token per item) on a backend that
// replays recorded launches gets pad rows up to the backend's bucket (Backend::decode_step_rows)
// when the cache has a pad state for them; their results are dropped.
//
// Forward is one description of LFM2 for every backend: activations and scratch live in the
// backend's memory (device memory on a GPU), and per step only the token ids, positions and a few
// indices go up and the wanted logits (or greedy ids) come down.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/model.h"
#include "cache/state_cache.h"

namespace lfm {

// A sampled item's last row comes down as its best candidates (Backend::top_candidates) after
// the request's logit edits (Backend::edit_logits; Forward fills in each edit's row), not whole.
struct ShortlistRequest {
  float temperature = 0.0f;  // for the tail's mass (0: greedy, no tail)
  std::span<const LogitEdit> edits;
  bool logsumexp = false;    // also the row's log Σ exp over every id (Backend::logsumexp_rows, before the edits)
};

struct BatchItem {
  Sequence* seq = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;   // logits for every new token, else only for the last one
  bool argmax_only = false;  // only the last token's greedy id (StepOutput::argmax), not its logits
  // Tokens that may be rejected (a verification step's drafts, a draft model's guesses): they
  // open or continue the sequence's speculative chain after the first `sure` tokens, and the
  // caller keeps the accepted prefix with StateCache::commit_accepted (the chain may reach the
  // cache's draft_tokens + 1 tokens).
  bool speculative = false;
  int64_t sure = 0;
  // Rows given as embeddings instead of looked up by token id (an image's tokens): rows
  // [offset, offset + rows) of this item's tokens take data [rows, hidden] (host memory).
  struct Embeddings {
    int64_t offset = 0, rows = 0;
    const float* data = nullptr;
  };
  std::span<const Embeddings> embeddings{};
  // What the state cache records for these tokens (the prefix index's keys; an image's tokens
  // are keyed by its content), as many as `tokens`; empty: the tokens themselves.
  std::span<const int32_t> cache_keys{};
  // Non-null: only its last row's shortlist (StepOutput::shortlist), not its logits.
  const ShortlistRequest* shortlist = nullptr;
  // The final normed hidden state of the rows it would get logits for (every row with all_logits,
  // else the last) in StepOutput::hidden (speech output's depth transformer reads it); with
  // skip_logits, no logits, greedy id or shortlist at all.
  bool hidden = false;
  bool skip_logits = false;
};

struct StepOutput {
  int64_t vocab = 0;
  std::vector<float> logits;         // [rows, vocab]
  std::vector<int64_t> first_row;    // per item: its first row in `logits` (-1: none, argmax_only)
  std::vector<int64_t> n_rows;       // per item: how many rows it has
  std::vector<int32_t> argmax;       // per item: its greedy id when argmax_only, else -1
  // Shortlisted items: shortlist_size candidates each, best first (id -1 past the allowed
  // ids), and the tail mass (Backend::top_candidates).
  int64_t shortlist_size = 0;
  std::vector<Candidate> candidates;
  std::vector<float> tails;
  std::vector<int64_t> shortlist_of;  // per item: its index among the shortlisted (-1: none)
  std::vector<double> logsumexps;     // per shortlisted item: its row's logsumexp when asked for, else NaN
  std::vector<int64_t> logits_row;    // per item: its last row in the step's logits (Forward::fetch_row)
  // Items with BatchItem::hidden: their rows' final normed hidden states [rows, hidden_size]
  // (host), and per item its first row there (-1: none; as many rows as n_rows would count).
  int64_t hidden_size = 0;
  std::vector<float> hidden;
  std::vector<int64_t> hidden_row;
  const float* hidden_of(size_t item, int64_t i = 0) const { return hidden.data() + (hidden_row[item] + i) * hidden_size; }
  const float* row(size_t item, int64_t i = 0) const;  // logits of the item's i-th row
  std::span<const Candidate> shortlist(size_t item) const;
  float tail(size_t item) const { return tails[static_cast<size_t>(shortlist_of[item])]; }
  double logsumexp(size_t item) const { return logsumexps[static_cast<size_t>(shortlist_of[item])]; }
};

// Debug hook: named intermediate tensors of a step ([rows, cols], rows = packed tokens).
using ActivationObserver = std::function<void(const std::string& name, const float* data, int64_t rows, int64_t cols)>;

class Forward {
 public:
  // `cache` must have the model's state shape (see model/state_plan.h).
  Forward(const Model& model, Backend& backend, StateCache& cache);

  // Runs the step, advances every item's sequence, and fills `out`. Room for the new tokens is
  // reserved first (a no-op when the caller reserved it). On an error (bad token id, context
  // overflow, no free KV blocks) no sequence's tokens or state change.
  void step(std::span<const BatchItem> items, StepOutput& out);
  // A shortlisted item's whole last row after its edits, into dst [vocab] (one row down from a
  // device): for a choice that depends on ids past the shortlist. Valid until the next step.
  void fetch_row(const StepOutput& out, size_t item, float* dst);
  // How many candidates a shortlisted row comes down as (1 to kShortlist, the default).
  static constexpr int64_t kShortlist = Backend::kMaxCandidates;
  void set_shortlist_size(int64_t n);

  StateCache& cache() { return cache_; }
  const Model& model() const { return model_; }

  void set_observer(ActivationObserver obs) { observer_ = std::move(obs); }

  // The ids greedy choices may take (argmax_only items): [vocab] flags, copied to the backend;
  // empty: every id.
  void set_allowed_tokens(std::span<const uint8_t> allowed);

 private:
  void conv_mixer(const LayerWeights& lw, int64_t layer);
  void attention_mixer(const LayerWeights& lw, int64_t layer);
  void dense_ffn(const FfnWeights& w, int64_t layer, const float* next_norm);
  void residual_add(const float* y, const TensorView& w, const WeightVector* bias, const float* norm, int64_t layer,
                    const char* name);
  void moe_ffn(const MoeWeights& w, int64_t layer, const float* next_norm);
  void add_mix(const float* norm);
  // Pad rows a decode step of `items` gets (T_ counted): -1 when the step is not bucketed (not a
  // decode step, a backend that does not pad, a bucket of one batch size, a cache without pad
  // state for them, an observer, which sees every row), else 0 or more.
  int64_t pad_rows(std::span<const BatchItem> items) const;
  void download_choices(std::span<const BatchItem> items, float* logits, int64_t R, StepOutput& out);
  void download_shortlists(std::span<const BatchItem> items, float* logits, StepOutput& out);
  // Reports "model.layers.<layer><suffix>" (or just `suffix` when layer < 0) to the observer.
  void observe(int64_t layer, const char* suffix, const float* data, int64_t rows, int64_t cols);

  // A scratch buffer of at least n elements of T in the backend's memory (grown, never shrunk).
  template <typename T>
  T* scratch(DeviceBuffer& buf, int64_t n) {
    ensure_capacity(be_, buf, static_cast<size_t>(n) * sizeof(T));
    return buf.as<T>();
  }

  const Model& model_;
  Backend& be_;
  StateCache& cache_;
  ActivationObserver observer_;

  // Step scratch in the backend's memory, sized by the packed token count T (reused between steps).
  int64_t T_ = 0;
  std::vector<SeqRun> runs_;   // one per item (host descriptors)
  float *h_ = nullptr, *a_ = nullptr, *mix_ = nullptr;  // [T, d]: residual stream, normed input, mixer/FFN output
  const int64_t* positions_ = nullptr;                   // [T]
  DeviceBuffer h_buf_, a_buf_, mix_buf_, proj_buf_, tmp_buf_, tmp2_buf_, tmp3_buf_, ids_buf_, positions_buf_;
  DeviceBuffer rows_buf_, logits_buf_, argmax_buf_, allowed_buf_, keep_buf_, kept_buf_;
  DeviceBuffer edits_buf_, candidate_rows_buf_, lse_rows_buf_;
  DeviceBuffer shortlist_out_buf_;        // candidates | tails | logsumexps, downloaded at once
  std::vector<uint8_t> shortlist_host_;   // and where they land
  const float* step_logits_ = nullptr;  // the last step's logits [rows, vocab] (fetch_row)
  int64_t shortlist_size_ = kShortlist;
  bool has_allowed_ = false;
  DeviceBuffer gate_buf_, up_buf_;  // [rows, F] SwiGLU scratch, reused across layers and steps
  // MoE: router logits [rows, E]; each token's experts and weights [rows, k]; the experts' gathered
  // inputs and outputs [rows · k, d]; the gather index [rows · k], each choice's output row
  // [rows, k] and each expert's first grouped row [E + 1].
  DeviceBuffer moe_logits_buf_, moe_experts_buf_, moe_weights_buf_, moe_in_buf_, moe_out_buf_, moe_index_buf_,
      moe_src_buf_, moe_first_buf_;
  std::vector<const TensorView*> moe_w1_, moe_w3_, moe_w2_;  // a layer's experts' matrices
  std::vector<float> observed_;  // a host copy of what the observer sees, for a device backend
};

}  // namespace lfm
