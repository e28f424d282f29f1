// Speculative decoding in the scheduler (issue 37): planning drafts, running the draft model's
// steps, and keeping what a verification accepted. Runs on the scheduler thread only.
#include <algorithm>

#include "engine/engine.h"
#include "engine/engine_active.h"
#include "engine/ngram_drafter.h"

namespace lfm {

void Engine::plan_drafts(Active& a, int64_t room) {
  a.verify.clear();
  a.drafts_forced = false;
  if (a.max_drafts == 0) return;
  // A verification of d drafts yields up to d + 1 tokens: stay within the request's limit.
  const int64_t left = a.limit - static_cast<int64_t>(a.tokens.size()) - 1;
  // Text the grammar forces is the surest draft there is: it goes first, whatever the drafter.
  if (a.forced_len) {
    std::vector<int32_t> forced = forced_drafts(a, std::min(left, room));
    // As many as recent forced drafts were accepted suggests (the model's own split of the text
    // may differ from the tokenizer's); counted only where there is forced text.
    if (!forced.empty()) forced.resize(static_cast<size_t>(std::min<int64_t>(a.forced_len->take(), forced.size())));
    if (!forced.empty()) {
      a.verify.push_back(a.tokens.back());
      a.verify.insert(a.verify.end(), forced.begin(), forced.end());
      a.drafts_forced = true;
      return;
    }
    if (a.req.drafter == Drafter::kNone) return;
  }
  const int64_t k = std::min({a.draft_len->take(), left, room});
  if (a.draft_len->given_up() && a.draft_seq) close_draft(a);  // its state is of no more use
  if (k <= 0) return;
  std::vector<int32_t> drafts = a.req.drafter == Drafter::kNgram ? ngram_draft(a.tokens, k) : std::vector<int32_t>(k, 0);
  if (drafts.empty()) return;
  a.verify.push_back(a.tokens.back());
  a.verify.insert(a.verify.end(), drafts.begin(), drafts.end());
}

void Engine::close_draft(Active& a) {
  if (a.draft_seq) draft_cache_->close(a.draft_seq);
  a.draft_seq = nullptr;
  a.draft_chain = false;
}

bool Engine::open_draft(Active& a) {
  if (!a.draft_seq && draft_cache_->can_open()) {
    a.draft_seq = draft_cache_->open(opt_.state.ctx_size);
    draft_cache_->attach_prefix(*a.draft_seq, a.tokens);  // resumes from the draft cache's prefix
  }
  return a.draft_seq != nullptr;
}

void Engine::run_drafts(const std::vector<Active*>& batch, std::vector<int64_t>& counts) {
  try {
    draft_steps(batch, counts);
  } catch (...) {
    // A draft step failed, or drafting for one request did: the draft state is unknown, so it is
    // dropped (rebuilt later) and this step decodes plainly; no request ends for it.
    for (size_t i = 0; i < batch.size(); ++i) {
      Active& a = *batch[i];
      if (a.req.drafter != Drafter::kModel || a.drafts_forced) continue;
      close_draft(a);
      if (!a.verify.empty()) {
        a.verify.clear();
        counts[i] = 1;
      }
    }
  }
}

void Engine::draft_steps(const std::vector<Active*>& batch, std::vector<int64_t>& counts) {
  // Who drafts with the model this step, each with its draft state ready: open (resuming from
  // the draft cache's prefix), room reserved for the tokens it has not seen and the chain.
  std::vector<BatchItem> items;
  std::vector<Active*> owner;  // per item: the request it drafts for, null for a catch-up chunk
  auto plain = [&](size_t i) {
    batch[i]->verify.clear();
    counts[i] = 1;
  };
  for (size_t i = 0; i < batch.size(); ++i) {
    Active& a = *batch[i];
    // max_drafts 0 (asked, or no room in the engine): a plain request that has no DraftLength.
    if (a.req.drafter != Drafter::kModel || a.max_drafts == 0 || a.draft_len->given_up() || a.drafts_forced) continue;
    if (a.n_generated == 0) {
      // Prefilling: the draft model reads the same prompt chunk now, so its prefill is part of
      // the time to the first token (as the model's is), not of the first draft.
      if (!open_draft(a)) continue;
      const int64_t seen = a.draft_seq->n_past();
      const int64_t n = std::min(a.n_fed + counts[i] - seen, opt_.batch_tokens);
      if (n > 0 && draft_cache_->reserve(*a.draft_seq, n)) {
        items.push_back({a.draft_seq, std::span<const int32_t>(a.tokens.data() + seen, static_cast<size_t>(n))});
        owner.push_back(nullptr);
      }
      continue;
    }
    if (a.verify.empty()) continue;
    if (!open_draft(a)) {
      plain(i);
      continue;
    }
    const int64_t seen = a.draft_seq->n_past();
    const int64_t pending = static_cast<int64_t>(a.tokens.size()) - seen;
    const std::span<const int32_t> unseen(a.tokens.data() + seen, static_cast<size_t>(pending));
    if (pending > opt_.batch_tokens) {  // a long prompt: the draft model catches up in chunks first
      plain(i);
      if (draft_cache_->reserve(*a.draft_seq, opt_.batch_tokens)) {
        items.push_back({a.draft_seq, unseen.first(opt_.batch_tokens)});
        owner.push_back(nullptr);
      }
      continue;
    }
    const int64_t k = static_cast<int64_t>(a.verify.size()) - 1;
    if (!draft_cache_->reserve(*a.draft_seq, pending + k - 1)) {
      plain(i);
      continue;
    }
    // The unseen tokens; the chain starts at the last (the sampled one), whose output is draft 1.
    items.push_back({a.draft_seq, unseen, false, a.sampler->plain_greedy(), true, pending - 1});
    owner.push_back(&a);
    a.draft_q.clear();
    if (a.sampler->plain_greedy())
      a.draft_sampler.reset();
    else
      a.draft_sampler.emplace(a.sampler->fork());
  }
  if (items.empty()) return;
  // Step j gives every drafting request with more than j drafts its draft j + 1.
  for (int64_t j = 0;; ++j) {
    draft_forward_->step(items, draft_out_);  // a failure is caught by run_drafts
    std::vector<BatchItem> next;
    std::vector<Active*> next_owner;
    for (size_t at = 0; at < items.size(); ++at) {
      const BatchItem& it = items[at];
      Active* a = owner[at];
      if (!a) continue;  // a catch-up chunk
      a->draft_chain = true;
      int32_t d;
      if (it.argmax_only) {
        d = draft_out_.argmax[at];
      } else {
        a->draft_q.emplace_back();
        d = a->draft_sampler->sample(draft_out_.row(at), &a->draft_q.back()).token;
      }
      a->verify[j + 1] = d;
      if (j + 2 < static_cast<int64_t>(a->verify.size())) {
        next.push_back({a->draft_seq, std::span<const int32_t>(&a->verify[j + 1], 1), false, it.argmax_only, true});
        next_owner.push_back(a);
      }
    }
    if (next.empty()) return;
    items = std::move(next);
    owner = std::move(next_owner);
  }
}

void Engine::after_verification(Active& a, size_t item) {
  // Sampling, the grammar's steps, the detokenizer and stop strings: this request's alone.
  guarded(a, "verifying drafts", [&] { keep_verified(a, item); });
}

void Engine::keep_verified(Active& a, size_t item) {
  const int64_t n = static_cast<int64_t>(a.verify.size());
  // Row r's choice is the token after verify[r]; it is the next draft's check (greedy: equal to
  // it; sampled: the rejection rule against the draft's q).
  int64_t r = 0;
  for (;; ++r) {
    SampleResult res;
    bool accepted = false;
    if (a.matcher) prepare_mask(a);
    if (r + 1 < n) {
      const TokenProbs* q = a.req.drafter == Drafter::kModel && !a.drafts_forced && r < static_cast<int64_t>(a.draft_q.size())
                                ? &a.draft_q[r]
                                : nullptr;
      res = a.sampler->verify(out_.row(item, r), a.verify[r + 1], q, accepted);
    } else {
      res = a.sampler->sample(out_.row(item, r));
    }
    if (a.matcher && !accept_grammar(a, res.token)) return;
    deliver(a, std::move(res));
    if (a.finished) return;  // stopped (stop id, string, length, grammar): the state is gone
    if (!accepted) break;
  }
  // verify[0 .. r] are in the state now; the last choice waits to be fed. The draft model's
  // chain holds verify[0 .. k-1]: it keeps what was accepted of it.
  cache_->commit_accepted(*a.seq, r + 1);
  if (a.draft_chain) {
    draft_cache_->commit_accepted(*a.draft_seq, std::min(r + 1, n - 1));
    a.draft_chain = false;
  }
  a.n_fed += r + 1;
  (a.drafts_forced ? a.forced_len : a.draft_len)->update(n - 1, r);
  a.usage.drafted_tokens += n - 1;
  a.usage.accepted_tokens += r;
  ++a.usage.verify_steps;
  totals_.drafted_tokens += n - 1;
  totals_.accepted_tokens += r;
  a.verify.clear();
}

}  // namespace lfm
