// The multi-request engine every front end uses: submit requests, read their event streams,
// cancel them. One scheduler thread owns the model's state and builds each step from the decode
// tokens of running requests plus prefill chunks of waiting ones, under a token budget:
//   * FCFS, at most `parallel` requests running (one conv-state slot each);
//   * while requests decode, prompt tokens join a step as far as the inter-token latency target
//     allows, by a cost model fitted to the steps run (step_budget.h; or a fixed prefill_chunk);
//   * a new request resumes from its longest cached prefix (prefix cache, on by default);
//   * when KV blocks run out, the youngest running request is preempted (its state released, its
//     full blocks left in the prefix cache) and later resumed by recomputation;
//   * a request's tokens never depend on what else runs: the kernels are batch- and
//     chunking-invariant and each request samples from its own seeded generator.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <list>
#include <map>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/state_cache.h"
#include "core/error.h"
#include "engine/request.h"
#include "engine/step_budget.h"
#include "model/forward.h"
#include "model/state_plan.h"

namespace lfm {

class Tokenizer;
class DepthDecoder;
class WaveformStreams;
namespace grammar {
struct Grammar;
class TokenVocabulary;
}  // namespace grammar

// submit() when the queue is full: the caller may retry later (HTTP 429).
class EngineBusy : public Error {
 public:
  using Error::Error;
};

// The fewest prompt tokens a step takes next to decode tokens under itl_target_ms: the fixed
// chunk the engine used before the target, so prefill never progresses more slowly than it did.
inline constexpr int64_t kMinPromptTokens = 16;

// The most audio frames one request's waveform may have (12.5 frames a second: 2 minutes): the
// detokenizer keeps K/V for every row of a stream, so its pool is sized by this.
inline constexpr int64_t kMaxWaveformFrames = 1500;

struct EngineOptions {
  StatePlanOptions state;      // context size, parallel sequences, block size, cache type, memory
  int64_t batch_tokens = 512;  // most tokens in one step (decode tokens count one each)
  // While requests are decoding, every step delays their next token by its whole duration, so a
  // prompt arriving is prefilled in chunks sized to keep the step within this inter-token latency
  // target: the step's duration is predicted from its token counts by a cost model fitted to the
  // steps run (engine/step_budget.h), and the prompt tokens are as many as the target leaves, but
  // at least kMinPromptTokens so prefill always progresses. 0: no target, prompts fill the step
  // up to batch_tokens. When nothing is decoding, prompts always fill the step.
  double itl_target_ms = 200;
  // A fixed count instead, which wins over itl_target_ms when set: -1 (unset): the target
  // decides; 0: prompts fill the step up to batch_tokens; N: at most N prompt tokens join a step
  // next to decode tokens. The library's default is the fixed 16 (kMinPromptTokens): a schedule
  // that does not depend on timing, which tests and tools that count steps rely on; the front
  // ends (lfm serve, generate, chat) leave it unset, so the target decides there.
  int64_t prefill_chunk = kMinPromptTokens;
  // Images (LFM2-VL): while other requests decode, encoding an image's tiles takes at most this
  // long per step (at least one stage: the patch embedding, one encoder layer, or the projector),
  // so their streams go on beside it; the request's prefill stops before a tile not yet encoded.
  // -1: itl_target_ms; 0: whole images in one step. Nothing decoding: whole images at once.
  double encode_slice_ms = -1;
  int64_t max_queued = 4096;   // submissions waiting beyond this are refused
  // The candidates a sampled row comes down as (1 to Forward::kShortlist); a choice that depends
  // on ids past them fetches the whole row. Fewer: less to transfer, more whole rows; 0: every
  // request that is not plain greedy takes its whole row.
  int64_t sample_candidates = Forward::kShortlist;
  // Told of the prefix cache's changes on the scheduler thread, and of every scheduler pass's
  // end (a batching point): `lfm serve --kv-events` (server/kv_events.h). Null: nobody. It must
  // outlive the engine.
  PrefixCacheListener* cache_listener = nullptr;
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t finished = 0, cancelled = 0, failed = 0, preemptions = 0, steps = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0, computed_tokens = 0;
  int64_t drafted_tokens = 0, accepted_tokens = 0;  // speculative decoding
  StateCacheStats cache;
};

class Engine {
 public:
  // `tokenizer` (optional) gives text pieces, stop strings and the mask of decodable ids.
  // `draft` (optional) is the draft model for Drafter::kModel requests: the same vocabulary and
  // tokenizer, run on the same backend with its own state pools (as many sequences and blocks as
  // the target's). The models, backend and tokenizer must outlive the engine.
  Engine(const Model& model, Backend& backend, const Tokenizer* tokenizer, const EngineOptions& opt,
         const Model* draft = nullptr);
  ~Engine();  // cancels whatever is still running
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws lfm::Error, naming the problem, when it can never run (bad ids or
  // sampling fields, prompt past the context, more KV than the pool holds, queue full); other
  // requests are unaffected.
  std::shared_ptr<RequestStream> submit(Request req);
  void cancel(uint64_t id);
  // Cancels every request not finished yet (shutdown).
  void cancel_all();

  EngineStats stats() const;
  const EngineOptions& options() const { return opt_; }
  const StateCacheOptions& cache_options() const { return cache_->options(); }
  int64_t ctx_size() const { return opt_.state.ctx_size; }
  int64_t vocab_size() const;  // the model's output rows (valid token ids)
  bool has_draft_model() const { return draft_model_ != nullptr; }
  // A grammar bound to this engine's vocabulary, for Request::grammar (keep and reuse it: its
  // mask cache fills as requests use it). Needs a tokenizer. Thread-safe.
  std::shared_ptr<const grammar::TokenGrammar> compile_grammar(std::shared_ptr<const grammar::Grammar> g) const;
  // Blocks until nothing is running or waiting (for tests and benchmarks).
  void wait_idle();
  // Forgets the whole prefix cache (StateCache::flush_prefix_cache: also blocks running requests
  // hold, which they keep using) between two steps; returns once done. Thread-safe.
  void reset_prefix_cache();

 private:
  struct Active;  // one request inside the scheduler
  struct Wakeup;

  void loop();
  void reset_if_asked();  // the prefix cache flush reset_prefix_cache asked for, if any
  // One pass of the scheduler: admission, planning, images, drafts, the step and its tokens.
  void schedule(std::vector<Active*>& batch, std::vector<int64_t>& counts);
  // The last resort when an exception escaped a pass (no request's own guard caught it): the
  // requests of its step end with kError (or, when it had none, every known request: which one
  // failed cannot be told), and the scheduler goes on.
  void recover(const std::vector<Active*>& batch, const std::exception_ptr& e);
  // Runs one request's part of a step (`stage` names it in the error): an exception ends that
  // request alone (kError, its blocks and draft state freed) and gives false; true when the
  // request is still running.
  bool guarded(Active& a, const char* stage, const std::function<void()>& body);
  void fail_request(Active& a, const char* stage, const std::exception_ptr& e);
  void admit_submissions();
  void drop_cancelled();
  bool plan_step(std::vector<Active*>& batch, std::vector<int64_t>& counts);
  // Most prompt tokens a step may take next to `decoders` decode tokens (prefill_chunk, or what
  // itl_target_ms leaves by the step cost model).
  int64_t prompt_budget(int64_t decoders) const;
  // Requests whose input to the step cannot be built end here and leave the batch.
  void run_step(std::vector<Active*>& batch, std::vector<int64_t>& counts);
  // The token `choose` gives (the sampler on the step's output), delivered.
  void after_token(Active& a, const std::function<SampleResult()>& choose);
  // Structured output: the step's masks for requests whose next token is due (on a thread of
  // their own while the step runs), before sampling a row, and the chosen token's acceptance
  // (false: the request ended, as its grammar is complete or refused the token).
  void fill_masks(const std::vector<Active*>& batch, const std::vector<int64_t>& counts);
  void prepare_mask(Active& a);
  bool accept_grammar(Active& a, int32_t token);
  // Jump-forward: the text the request's grammar forces next, tokenized (at most k ids).
  std::vector<int32_t> forced_drafts(Active& a, int64_t k);
  // Delivers a chosen token: its event, then the stop checks.
  void deliver(Active& a, SampleResult r);
  // After a verification step (item i of the step): each row's choice in turn while it equals
  // the next draft, then the state keeps what was accepted.
  void after_verification(Active& a, size_t item);
  void keep_verified(Active& a, size_t item);  // after_verification's work, unguarded
  // How many tokens a decoding request drafts this step, at most `room`: prompt-lookup drafts
  // are found now (into a.verify), a draft model's are placeholders until run_drafts.
  void plan_drafts(Active& a, int64_t room);
  // The draft model's steps for the requests of this step drafting with it: catch up on the
  // tokens it has not seen, then one step per drafted token. A request whose draft state cannot
  // be had (no slot or blocks) decodes plainly this step (its count becomes 1).
  void run_drafts(const std::vector<Active*>& batch, std::vector<int64_t>& counts);
  void draft_steps(const std::vector<Active*>& batch, std::vector<int64_t>& counts);  // unguarded
  // The request's draft-model sequence, opened now if a slot is free; false when none is.
  bool open_draft(Active& a);
  void close_draft(Active& a);
  void preempt(Active* victim);
  // Images and audio (engine_images.cpp): checks at submit and the prompt's cache keys; the tokens
  // the prefix cache is searched with; the tiles and clips this step's prompt chunks reach, encoded
  // by the vision tower or the speech encoder (a request whose medium cannot be encoded ends with
  // an error and leaves the batch); and an item's embedding rows and cache keys for its chunk.
  void prepare_images(Active& a);
  void prepare_audio(Active& a);
  std::vector<int32_t> prefix_keys(const Active& a) const;
  // Whether a waiting request with these keys should wait for a running request that is
  // prefilling the same leading blocks (they will be in the prefix cache), not compute them too.
  bool awaits_shared_prefill(std::span<const int32_t> keys) const;
  void encode_images(std::vector<Active*>& batch, std::vector<int64_t>& counts);
  void image_rows(const Active& a, int64_t from, int64_t n, std::vector<BatchItem::Embeddings>& rows,
                  std::vector<int32_t>& keys) const;
  // Speech output (engine_speech.cpp): checks at submit (the earlier spoken turns' frames keyed in
  // the prompt); an item's audio-frame rows (their embeddings, their ids made valid, their keys);
  // the modality after a text token; this step's frames from the speaking items' hidden states
  // (the depth transformer for all of them at once), each delivered.
  void prepare_speech(Active& a);
  void speech_rows(const Active& a, int64_t from, int64_t n, std::vector<BatchItem::Embeddings>& rows,
                   std::vector<int32_t>& keys, std::vector<int32_t>& ids, std::vector<float>& embeds) const;
  void speech_after_text(Active& a, int32_t token);
  void make_frames(const std::vector<Active*>& speakers, const std::vector<size_t>& items);
  Event deliver_frame(Active& a, std::span<const int32_t> codes);  // the frame's event, not yet pushed
  // The waveform's last samples (the detokenizer's tail) and its stream closed; empty without one.
  std::vector<float> end_waveform(Active& a);
  void finish(Active& a, FinishReason why, std::string error = {}, std::string text = {});
  void publish_stats();

  const Model& model_;
  Backend& backend_;
  const Tokenizer* tok_;
  EngineOptions opt_;
  std::unique_ptr<StateCache> cache_;
  std::unique_ptr<Forward> forward_;
  const Model* draft_model_ = nullptr;           // with its own state and forward, or none
  std::unique_ptr<StateCache> draft_cache_;
  std::unique_ptr<Forward> draft_forward_;
  StepOutput draft_out_;
  std::vector<int32_t> eos_ids_;
  std::vector<uint8_t> allowed_;  // decodable ids (empty without a tokenizer)
  mutable std::mutex vocab_mu_;
  mutable std::shared_ptr<const grammar::TokenVocabulary> grammar_vocab_;  // built on first use

  std::shared_ptr<Wakeup> wake_;
  std::deque<std::unique_ptr<Active>> inbox_;  // guarded by wake_->mu
  uint64_t resets_asked_ = 0, resets_done_ = 0;  // reset_prefix_cache calls; guarded by wake_->mu
  std::atomic<uint64_t> next_id_{1};

  // Scheduler-thread state.
  std::vector<std::unique_ptr<Active>> running_;  // admission order, oldest first
  // Encoded image tiles and audio clips by (content hash, tile), least recently used first, under
  // a byte budget: a repeated image or clip is not encoded again even where its prefix is not cached.
  std::list<std::pair<std::pair<uint64_t, int>, std::shared_ptr<const std::vector<float>>>> tile_cache_;
  size_t tile_cache_bytes_ = 0;
  // This step's embedding rows and cache keys per item (they must outlive Forward::step).
  std::vector<std::vector<BatchItem::Embeddings>> step_rows_;
  std::vector<std::vector<int32_t>> step_keys_;
  std::vector<std::vector<int32_t>> step_ids_;     // an item's ids with audio frames' keys made valid
  std::vector<std::vector<float>> step_embeds_;   // its audio frames' embedding rows
  std::unique_ptr<DepthDecoder> depth_;            // speech output's depth transformer (null: none)
  std::unique_ptr<WaveformStreams> detok_;         // and its waveforms (null: no detokenizer)
  std::deque<std::unique_ptr<Active>> waiting_;   // arrival order
  StepOutput out_;
  EngineStats totals_;
  StepCostModel step_cost_;  // fitted from every step's duration and token counts

  // Shared with front-end threads, under stats_mu_.
  mutable std::mutex stats_mu_;
  EngineStats published_;
  int64_t outstanding_ = 0;  // submitted and not finished
  int64_t queued_ = 0;       // submitted and never admitted yet (the queue max_queued bounds)
  bool idle_ = true;         // published when nothing is queued or running
  std::unordered_map<uint64_t, std::weak_ptr<RequestStream>> streams_;  // by id, for cancel()
  std::condition_variable idle_cv_;
  std::thread thread_;
};

}  // namespace lfm
