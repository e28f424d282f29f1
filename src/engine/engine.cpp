// The scheduler: admission, step planning under the token budget, preemption and sampling
// (engine_delivery.cpp: a sampled token's events and a request's end). Everything below `loop()`
// runs on the scheduler thread only.
#include "engine/engine.h"
#include "engine/engine_active.h"
#include "model/speech_out.h"
#include "model/waveform_decoder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <optional>

#include "core/error.h"
#include "engine/stop_strings.h"
#include "engine/ngram_drafter.h"
#include "engine/token_mask.h"
#include "grammar/token_grammar.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm {

using Clock = std::chrono::steady_clock;

// Shared with every stream's waker, so a stream may outlive the engine safely.
struct Engine::Wakeup {
  std::mutex mu;
  std::condition_variable cv;
  bool signal = false;
  bool stop = false;
  void notify() {
    {
      std::lock_guard lock(mu);
      signal = true;
    }
    cv.notify_all();
  }
};


Engine::Engine(const Model& model, Backend& backend, const Tokenizer* tokenizer, const EngineOptions& opt,
               const Model* draft)
    : model_(model), backend_(backend), tok_(tokenizer), opt_(opt), draft_model_(draft), wake_(std::make_shared<Wakeup>()) {
  LFM_CHECK(opt.batch_tokens >= 1, "engine: --batch-tokens must be at least 1, got ", opt.batch_tokens);
  LFM_CHECK(opt.prefill_chunk >= -1, "engine: --prefill-chunk must be 0 or more, got ", opt.prefill_chunk);
  LFM_CHECK(opt.itl_target_ms >= 0 && std::isfinite(opt.itl_target_ms),
            "engine: --itl-target-ms must be 0 (off) or more, got ", opt.itl_target_ms);
  LFM_CHECK(opt.sample_candidates >= 0 && opt.sample_candidates <= Forward::kShortlist,
            "engine: sample_candidates must be in [0, ", Forward::kShortlist, "], got ", opt.sample_candidates);
  LFM_CHECK(opt.max_queued >= 1, "engine: the queue must hold at least one request, got ", opt.max_queued);
  LFM_CHECK(opt.state.ctx_size >= 2, "engine: --ctx-size must be at least 2, got ", opt.state.ctx_size);
  StatePlanOptions plan = opt.state;
  plan.pad_rows = backend.decode_step_max_pad();  // room for the decode steps' pad rows
  cache_ = make_state_cache(model, plan, backend);
  cache_->set_listener(opt.cache_listener);
  forward_ = std::make_unique<Forward>(model, backend, *cache_);
  if (opt.sample_candidates > 0) forward_->set_shortlist_size(opt.sample_candidates);
  if (model.speech_out()) depth_ = std::make_unique<DepthDecoder>(*model.speech_out(), backend);
  // One waveform stream per running request; a stream's frames are bounded (its K/V is kept for
  // every row: model/detokenizer.h), so a spoken reply is at most kMaxWaveformFrames long.
  if (model.speech_out() && model.detokenizer())
    detok_ = model.detokenizer()->streams(backend, opt.state.parallel,
                                          std::min<int64_t>(opt.state.ctx_size, kMaxWaveformFrames));
  eos_ids_ = model.config().eos_token_ids;
  if (tok_) {
    if (tok_->eos_id() >= 0) eos_ids_.push_back(tok_->eos_id());
    allowed_ = decodable_token_mask(*tok_, model.config().vocab_size);
    forward_->set_allowed_tokens(allowed_);
  }
  if (draft) {
    LFM_CHECK(draft->config().vocab_size == model.config().vocab_size, "engine: the draft model's vocabulary (",
              draft->config().vocab_size, " ids) is not the model's (", model.config().vocab_size,
              "): a draft model must share the model's tokenizer");
    LFM_CHECK(opt.state.draft_tokens >= 1, "engine: a draft model needs room for drafted tokens (state.draft_tokens, got ",
              opt.state.draft_tokens, ")");
    // As many sequences, block size and blocks as the model's pools (token for token the same
    // capacity), in the draft model's state type unless one was given.
    StatePlanOptions dp = plan;
    dp.memory_bytes = 0;
    if (!dp.type) dp.type = default_state_type(*draft);
    StateCacheOptions dco = plan_state_cache(draft->config(), dp);
    dco.n_blocks = cache_->options().n_blocks;
    draft_cache_ = std::make_unique<StateCache>(state_shape(draft->config()), dco, backend);
    draft_forward_ = std::make_unique<Forward>(*draft, backend, *draft_cache_);
    if (tok_) draft_forward_->set_allowed_tokens(allowed_);
  }
  publish_stats();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(wake_->mu);
    wake_->stop = true;
  }
  wake_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> Engine::submit(Request req) {
  const ModelConfig& c = model_.config();
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  const int64_t ctx = opt_.state.ctx_size;
  LFM_CHECK(n >= 1, "engine: the prompt is empty (give at least one token)");
  for (int32_t t : req.prompt)
    LFM_CHECK(t >= 0 && t < c.vocab_size, "engine: prompt token id ", t, " is outside the vocabulary [0, ",
              c.vocab_size, ")");
  LFM_CHECK(n < ctx, "engine: the prompt has ", n, " tokens and needs room for at least one more: past the context size ",
            ctx);
  LFM_CHECK(req.max_tokens == -1 || req.max_tokens >= 1, "engine: max_tokens must be at least 1, got ",
            req.max_tokens);
  // Compared with the room left, never summed: max_tokens may be near 2^63 (n < ctx here).
  LFM_CHECK(req.max_tokens == -1 || req.max_tokens <= ctx - n, "engine: prompt (", n, " tokens) plus max_tokens (",
            req.max_tokens, ") is past the context size ", ctx);
  for (int32_t t : req.stop_ids)
    LFM_CHECK(t >= 0 && t < c.vocab_size, "engine: stop token id ", t, " is outside the vocabulary");
  LFM_CHECK(req.stop.empty() || tok_, "engine: stop strings need a tokenizer");
  req.sampling.validate(c.vocab_size);

  auto a = std::make_unique<Active>();
  a->id = next_id_++;
  a->n_prompt = n;
  a->limit = req.max_tokens == -1 ? ctx : n + req.max_tokens;
  const int64_t blocks = (a->limit + cache_->options().block_tokens - 1) / cache_->options().block_tokens;
  LFM_CHECK(blocks <= cache_->options().n_blocks, "engine: the request needs ", blocks,
            " KV blocks, the pool has ", cache_->options().n_blocks);
  a->tokens = req.prompt;
  a->stop_ids = req.stop_ids;
  if (!req.ignore_eos) a->stop_ids.insert(a->stop_ids.end(), eos_ids_.begin(), eos_ids_.end());
  a->sampler = std::make_unique<Sampler>(req.sampling, req.prompt, c.vocab_size, tok_ ? &allowed_ : nullptr);
  if (tok_) {
    a->detok = std::make_unique<StreamingDetokenizer>(*tok_, /*skip_special=*/true);
    a->detok->keep(req.show_special);
  }
  a->stops = std::make_unique<StopStrings>(req.stop);
  if (req.grammar) {
    {
      std::lock_guard lock(vocab_mu_);
      LFM_CHECK(&req.grammar->vocab() == grammar_vocab_.get(),
                "engine: the request's grammar was compiled for another engine (use Engine::compile_grammar)");
    }
    a->matcher = std::make_unique<grammar::GrammarMatcher>(req.grammar, a->stop_ids);
    a->mask.assign(static_cast<size_t>(a->matcher->mask_words()), 0);
    a->sampler->use_step_masks();
  }
  LFM_CHECK(req.max_drafts >= 0, "engine: max_drafts must not be negative, got ", req.max_drafts);
  LFM_CHECK(req.drafter != Drafter::kModel || draft_model_,
            "engine: the request asks for a draft model's drafts, but no draft model is loaded (--draft-model)");
  if (req.drafter != Drafter::kNone || (req.grammar && req.jump_forward))
    a->max_drafts = std::min(req.max_drafts, cache_->options().draft_tokens);
  if (req.grammar && req.jump_forward && a->max_drafts > 0) a->forced_len = std::make_unique<DraftLength>(a->max_drafts);
  // A draft model starts at two drafts per step and grows with what is accepted (each draft is a
  // step of its own), and if it is nearly always wrong gives up after 3 single-draft misses in a
  // row (DraftLength): it must read every token, so even pausing costs.
  if (a->max_drafts > 0)
    a->draft_len = req.drafter == Drafter::kModel ? std::make_unique<DraftLength>(a->max_drafts, 3, 2)
                                                   : std::make_unique<DraftLength>(a->max_drafts);
  a->usage.prompt_tokens = n;
  a->submitted = Clock::now();
  a->req = std::move(req);
  prepare_images(*a);  // checks the images and clips against the prompt; keys their tokens
  prepare_audio(*a);
  prepare_speech(*a);  // speech output, and the earlier spoken turns' frames
  a->stream = std::make_shared<RequestStream>(a->id);
  std::weak_ptr<Wakeup> weak = wake_;
  a->stream->set_waker([weak] {
    if (auto w = weak.lock()) w->notify();
  });
  auto stream = a->stream;
  {
    std::lock_guard lock(wake_->mu);
    LFM_CHECK(!wake_->stop, "engine: shutting down");
    std::lock_guard s(stats_mu_);
    if (queued_ >= opt_.max_queued) throw EngineBusy(cat("engine: the queue is full (", queued_, " requests waiting)"));
    ++outstanding_;
    ++queued_;
    // Counted at once, not at the scheduler's next publication (which may come only after a
    // long step): a gateway reading the gauges must not see an idle server with work queued.
    ++published_.waiting;
    streams_[a->id] = a->stream;
    inbox_.push_back(std::move(a));
    wake_->signal = true;
  }
  wake_->cv.notify_all();
  return stream;
}

void Engine::cancel(uint64_t id) {
  std::shared_ptr<RequestStream> target;
  {
    std::lock_guard s(stats_mu_);
    auto it = streams_.find(id);
    if (it != streams_.end()) target = it->second.lock();
  }
  if (target) target->cancel();  // the scheduler sees the flag and finishes it
}

int64_t Engine::vocab_size() const { return model_.config().vocab_size; }

void Engine::cancel_all() {
  std::vector<std::shared_ptr<RequestStream>> targets;
  {
    std::lock_guard s(stats_mu_);
    for (const auto& [id, weak] : streams_)
      if (auto st = weak.lock()) targets.push_back(st);
  }
  for (auto& t : targets) t->cancel();
}

EngineStats Engine::stats() const {
  std::lock_guard s(stats_mu_);
  return published_;
}

void Engine::wait_idle() {
  std::unique_lock s(stats_mu_);
  idle_cv_.wait(s, [&] { return idle_ && outstanding_ == 0; });
}

void Engine::publish_stats() {
  std::lock_guard s(stats_mu_);
  published_ = totals_;
  published_.running = static_cast<int64_t>(running_.size());
  int64_t preempted = 0;  // admitted once, waiting again
  for (const auto& a : waiting_) preempted += a->admitted ? 1 : 0;
  published_.waiting = queued_ + preempted;
  published_.cache = cache_->stats();
  idle_ = outstanding_ == 0 && running_.empty() && waiting_.empty();
  if (idle_) idle_cv_.notify_all();
}

// ---- scheduler thread ----

void Engine::loop() {
  std::vector<Active*> batch;
  std::vector<int64_t> counts;
  while (true) {
    {
      std::unique_lock lock(wake_->mu);
      wake_->cv.wait(lock, [&] {
        return wake_->stop || wake_->signal || !inbox_.empty() || !running_.empty() || !waiting_.empty() ||
               resets_asked_ > resets_done_;
      });
      if (wake_->stop) break;
      wake_->signal = false;
    }
    reset_if_asked();
    batch.clear();
    counts.clear();
    try {
      schedule(batch, counts);
    } catch (...) {
      recover(batch, std::current_exception());
    }
    if (opt_.cache_listener) opt_.cache_listener->step_end();
  }
  {
    std::lock_guard lock(wake_->mu);
    resets_done_ = resets_asked_;  // waiters see the engine stopping (reset_prefix_cache throws)
  }
  wake_->cv.notify_all();
  // Shutting down: everything still known ends as cancelled.
  admit_submissions();
  for (auto& a : running_) finish(*a, FinishReason::kCancelled);
  for (auto& a : waiting_) finish(*a, FinishReason::kCancelled);
  running_.clear();
  waiting_.clear();
  publish_stats();
}

void Engine::reset_prefix_cache() {
  uint64_t ticket = 0;
  {
    std::unique_lock lock(wake_->mu);
    LFM_CHECK(!wake_->stop, "engine: stopping, the prefix cache is not reset");
    ticket = ++resets_asked_;
  }
  wake_->cv.notify_all();
  std::unique_lock lock(wake_->mu);
  wake_->cv.wait(lock, [&] { return resets_done_ >= ticket || wake_->stop; });
  LFM_CHECK(resets_done_ >= ticket && !wake_->stop, "engine: stopped before the prefix cache was reset");
}

void Engine::reset_if_asked() {
  uint64_t asked = 0;
  {
    std::lock_guard lock(wake_->mu);
    if (resets_asked_ == resets_done_) return;
    asked = resets_asked_;
  }
  cache_->flush_prefix_cache();  // between steps: no step's run refers to an indexed block
  publish_stats();
  {
    std::lock_guard lock(wake_->mu);
    resets_done_ = asked;
  }
  wake_->cv.notify_all();
}

void Engine::schedule(std::vector<Active*>& batch, std::vector<int64_t>& counts) {
  admit_submissions();
  drop_cancelled();
  if (running_.empty() && waiting_.empty()) {
    publish_stats();
    return;
  }
  const auto started = Clock::now();
  plan_step(batch, counts);
  // What was just admitted runs now, holding its blocks: published before the step, which may
  // be a long cold prefill.
  publish_stats();
  // Encoding images is not the step's cost per token: kept out of the step cost model.
  const auto encode_started = Clock::now();
  if (!batch.empty() && (model_.vision() || model_.audio())) encode_images(batch, counts);
  const double encode_seconds = seconds_between(encode_started, Clock::now());
  if (!batch.empty() && draft_model_) run_drafts(batch, counts);
  if (!batch.empty()) {
    // The step's token counts before it runs (it may finish and free its requests).
    int64_t decode = 0, prompt = 0;
    for (size_t i = 0; i < batch.size(); ++i) (batch[i]->decoding() ? decode : prompt) += counts[i];
    run_step(batch, counts);
    step_cost_.observe(decode, prompt, seconds_between(started, Clock::now()) - encode_seconds);
  }
  publish_stats();
}

void Engine::admit_submissions() {
  std::deque<std::unique_ptr<Active>> fresh;
  {
    std::lock_guard lock(wake_->mu);
    fresh.swap(inbox_);
  }
  for (auto& a : fresh) waiting_.push_back(std::move(a));
}

void Engine::drop_cancelled() {
  auto sweep = [&](auto& list) {
    for (auto it = list.begin(); it != list.end();) {
      if ((*it)->stream->cancel_requested()) {
        finish(**it, FinishReason::kCancelled);
        it = list.erase(it);
      } else {
        ++it;
      }
    }
  };
  sweep(running_);
  sweep(waiting_);
}

int64_t Engine::prompt_budget(int64_t decoders) const {
  if (decoders == 0 || opt_.prefill_chunk == 0 || (opt_.prefill_chunk < 0 && opt_.itl_target_ms <= 0))
    return opt_.batch_tokens;
  if (opt_.prefill_chunk > 0) return opt_.prefill_chunk;
  const bool fitted = step_cost_.ready();
  const StepCost cost = fitted ? step_cost_.cost() : StepCost{};
  return prompt_token_budget(fitted ? &cost : nullptr, decoders, opt_.itl_target_ms / 1000.0, kMinPromptTokens,
                             opt_.batch_tokens);
}

bool Engine::plan_step(std::vector<Active*>& batch, std::vector<int64_t>& counts) {
  int64_t decoders_left = 0;
  for (const auto& a : running_) decoders_left += a->decoding() ? 1 : 0;
  int64_t budget = opt_.batch_tokens;
  int64_t prefill_left = prompt_budget(decoders_left);
  bool preempted = false;
  // Running requests first, oldest first: a decode token each, or the next prefill chunk from
  // what the decode tokens of the requests after it leave.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Active* a = running_[i].get();
    const bool decode = a->decoding();
    if (decode) --decoders_left;
    a->verify.clear();
    // Drafts fit what the budget leaves after one token for each later decoder. Jump-forward
    // walks the grammar past what any token has reached yet, so it can fail where sampling did not.
    if (decode && !guarded(*a, "planning drafts", [&] { plan_drafts(*a, budget - decoders_left - 1); })) {
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i--));
      continue;
    }
    const int64_t n = decode ? std::max<int64_t>(1, static_cast<int64_t>(a->verify.size()))
                             : std::min({static_cast<int64_t>(a->tokens.size()) - a->n_fed, budget - decoders_left,
                                         prefill_left});
    if (n <= 0) continue;
    bool self = false;
    while (!cache_->reserve(*a->seq, n)) {
      Active* victim = running_.back().get();  // the youngest, never one already in this step
      preempted = true;
      preempt(victim);
      if (victim == a) {
        self = true;
        break;
      }
    }
    if (self) break;
    batch.push_back(a);
    counts.push_back(n);
    budget -= n;
    if (!decode) prefill_left -= n;
  }
  // Then waiting requests, first come first served, while slots, blocks and budget allow. One
  // whose prompt starts with blocks that a running request is prefilling now waits for them (they
  // enter the prefix cache as they fill) rather than computing them beside it, so n candidates of
  // one prompt, or users sharing a system prompt, prefill it once; those after it go ahead.
  for (size_t w = 0; !preempted && std::min(budget, prefill_left) > 0 && w < waiting_.size() && cache_->can_open();) {
    Active* a = waiting_[w].get();
    bool waits = false, no_room = false;
    int64_t reused = 0, n = 0;
    const bool ok = guarded(*a, "admitting the request", [&] {
      const std::vector<int32_t> keys = prefix_keys(*a);
      if ((waits = awaits_shared_prefill(keys))) return;
      a->seq = cache_->open(opt_.state.ctx_size);  // held by the request at once: finish() frees it
      reused = cache_->attach_prefix(*a->seq, keys);
      n = std::min({static_cast<int64_t>(a->tokens.size()) - reused, budget, prefill_left});
      if ((no_room = !cache_->reserve(*a->seq, n))) {
        cache_->close(a->seq);
        a->seq = nullptr;
      }
    });
    if (!ok) {
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
      continue;
    }
    if (waits) {
      ++w;
      continue;
    }
    if (no_room) break;
    a->n_fed = reused;
    if (!a->admitted) {
      a->admitted = true;
      {
        std::lock_guard s(stats_mu_);
        --queued_;
      }
      a->usage.cached_tokens = reused;
      a->usage.queue_seconds = seconds_between(a->submitted, Clock::now());
      totals_.cached_tokens += reused;
    }
    running_.push_back(std::move(waiting_[w]));
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    batch.push_back(a);
    counts.push_back(n);
    budget -= n;
    prefill_left -= n;
  }
  return !batch.empty();
}

bool Engine::awaits_shared_prefill(std::span<const int32_t> keys) const {
  if (!opt_.state.prefix_cache) return false;
  const int64_t bt = opt_.state.block_tokens;
  // What it would take from the cache now (whole blocks, at least one token left to compute).
  const int64_t cached = cache_->cached_prefix(keys);
  const int64_t most = (static_cast<int64_t>(keys.size()) - 1) / bt * bt;
  if (most <= cached) return false;
  for (const auto& r : running_) {
    if (r->decoding() || !r->seq) continue;
    const std::vector<int32_t> rk = prefix_keys(*r);
    const size_t lim = static_cast<size_t>(std::min<int64_t>(most, static_cast<int64_t>(rk.size())));
    size_t common = 0;
    while (common < lim && keys[common] == rk[common]) ++common;
    const int64_t shared = static_cast<int64_t>(common) / bt * bt;  // whole blocks it will index
    if (shared > cached && r->n_fed < shared) return true;
  }
  return false;
}

void Engine::preempt(Active* victim) {
  victim->verify.clear();
  close_draft(*victim);
  cache_->close(victim->seq);
  victim->seq = nullptr;
  victim->n_fed = 0;
  ++victim->usage.preemptions;
  ++totals_.preemptions;
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == victim; });
  std::unique_ptr<Active> owned = std::move(*it);
  running_.erase(it);
  // Back to the queue in arrival order, so it resumes before anything that came after it.
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& p) { return p->id > owned->id; });
  waiting_.insert(pos, std::move(owned));
}

void Engine::run_step(std::vector<Active*>& batch, std::vector<int64_t>& counts) {
  std::vector<BatchItem> items;
  items.reserve(batch.size());
  if (step_rows_.size() < batch.size()) {
    step_rows_.resize(batch.size());
    step_keys_.resize(batch.size());
    step_ids_.resize(batch.size());
    step_embeds_.resize(batch.size());
  }
  for (size_t i = 0; i < batch.size();) {
    Active& a = *batch[i];
    const bool built = guarded(a, "preparing the step", [&] {
      if (!a.verify.empty()) {  // a verification step: every row's logits
        items.push_back({a.seq, a.verify, true, false, true});
        return;
      }
      // A plain greedy request that gets its next token this step needs only the argmax, which a
      // device backend computes in place (one id down instead of a row of logits).
      const bool token_due = a.n_fed + counts[i] == static_cast<int64_t>(a.tokens.size());
      // A speaking request's next output is an audio frame: the depth transformer reads the
      // backbone's hidden state, and no text logits are computed.
      const bool frame_due = token_due && a.speech && a.speech->audio;
      items.push_back({a.seq, std::span<const int32_t>(a.tokens.data() + a.n_fed, static_cast<size_t>(counts[i])),
                       false, token_due && !frame_due && a.sampler->plain_greedy()});
      items.back().hidden = items.back().skip_logits = frame_due;
      // Other requests sampled from the row's best candidates (penalties and bias applied where the
      // logits are) come down as those, not as the row.
      if (token_due && !frame_due && a.sampler->samples_from_shortlist(opt_.sample_candidates)) {
        a.sampler->logit_edits(a.edits);
        a.shortlist = {a.sampler->tail_temperature(opt_.sample_candidates), a.edits, a.sampler->wants_logprobs()};
        items.back().shortlist = &a.shortlist;
      }
      if (!a.tiles.empty() || a.speech) {
        step_rows_[i].clear();
        step_keys_[i].clear();
        if (!a.tiles.empty()) image_rows(a, a.n_fed, counts[i], step_rows_[i], step_keys_[i]);
        if (a.speech) {
          speech_rows(a, a.n_fed, counts[i], step_rows_[i], step_keys_[i], step_ids_[i], step_embeds_[i]);
          if (!step_ids_[i].empty()) items.back().tokens = step_ids_[i];
        }
        items.back().embeddings = step_rows_[i];
        if (!step_keys_[i].empty()) items.back().cache_keys = step_keys_[i];
      }
    });
    if (built) {
      ++i;
      continue;
    }
    // It ended (its blocks freed): out of the step, its item (if any) with it.
    while (items.size() > i) items.pop_back();
    batch.erase(batch.begin() + static_cast<std::ptrdiff_t>(i));
    counts.erase(counts.begin() + static_cast<std::ptrdiff_t>(i));
  }
  if (batch.empty()) {
    std::erase_if(running_, [](const auto& a) { return a->finished; });
    return;
  }
  // Grammar masks for this step's tokens are computed while the step runs.
  std::future<void> masks;
  if (std::any_of(batch.begin(), batch.end(), [](const Active* a) { return a->matcher != nullptr; }))
    masks = std::async(std::launch::async, [&] { fill_masks(batch, counts); });
  try {
    forward_->step(items, out_);
  } catch (...) {
    if (masks.valid()) masks.get();
    const std::string why = "engine: step failed: " + exception_text(std::current_exception());
    for (Active* a : batch) finish(*a, FinishReason::kError, why);
  }
  if (masks.valid()) masks.get();
  ++totals_.steps;
  std::vector<Active*> speakers;
  std::vector<size_t> speaker_items;
  for (size_t i = 0; i < batch.size(); ++i) {
    Active* a = batch[i];
    if (a->finished) continue;
    if (!a->verify.empty()) {
      totals_.computed_tokens += counts[i];
      after_verification(*a, i);
      continue;
    }
    if (a->n_generated == 0) ++a->usage.prefill_steps;
    a->n_fed += counts[i];
    totals_.computed_tokens += counts[i];
    if (a->n_fed != static_cast<int64_t>(a->tokens.size())) continue;
    if (items[i].hidden) {  // an audio frame: made below, for all speaking items together
      speakers.push_back(a);
      speaker_items.push_back(i);
      continue;
    }
    if (items[i].shortlist)
      after_token(*a, [&] {
        return a->sampler->sample_shortlist(out_.shortlist(i), out_.tail(i),
                                            [&](float* row) { forward_->fetch_row(out_, i, row); }, out_.logsumexp(i));
      });
    else if (items[i].argmax_only)
      after_token(*a, [&] { return a->sampler->accept(out_.argmax[i]); });
    else
      after_token(*a, [&] { return a->sampler->sample(out_.row(i)); });
  }
  if (!speakers.empty()) make_frames(speakers, speaker_items);
  std::erase_if(running_, [](const auto& a) { return a->finished; });
}

}  // namespace lfm
