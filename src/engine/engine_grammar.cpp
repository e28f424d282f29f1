// Structured output in the scheduler: grammars bound to the engine's vocabulary, the per-step
// token masks (computed while the step runs) and the grammar's state after each token.
#include "engine/engine.h"
#include "engine/engine_active.h"
#include "grammar/token_grammar.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace lfm {

namespace {

// Each id's bytes as the grammar sees them: ordinary tokens their text bytes; added tokens none,
// special or not (LFM2's <|tool_call_start|> is an added token not marked special): they are
// markers, reachable only where a grammar names them as <|...|> elements, so that free text in a
// grammar can never open a tool call; undecodable ids none.
std::shared_ptr<const grammar::TokenVocabulary> make_vocabulary(const Tokenizer& tok, int64_t vocab,
                                                                  const std::vector<uint8_t>& decodable) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  std::vector<uint8_t> added(static_cast<size_t>(vocab), 0);
  std::vector<std::pair<std::string, int32_t>> special;
  for (const auto& a : tok.spec().added_tokens)
    if (a.id >= 0 && a.id < vocab) {
      added[static_cast<size_t>(a.id)] = 1;
      special.push_back({a.content, a.id});
    }
  for (int64_t id = 0; id < vocab; ++id)
    if (decodable[static_cast<size_t>(id)] && !added[static_cast<size_t>(id)])
      tok.append_token_bytes(static_cast<int32_t>(id), bytes[static_cast<size_t>(id)]);
  return std::make_shared<grammar::TokenVocabulary>(std::move(bytes), std::move(special));
}

}  // namespace

std::shared_ptr<const grammar::TokenGrammar> Engine::compile_grammar(std::shared_ptr<const grammar::Grammar> g) const {
  LFM_CHECK(tok_, "engine: structured output needs the model's tokenizer");
  std::shared_ptr<const grammar::TokenVocabulary> v;
  {
    std::lock_guard lock(vocab_mu_);
    if (!grammar_vocab_) grammar_vocab_ = make_vocabulary(*tok_, vocab_size(), allowed_);
    v = grammar_vocab_;
  }
  return std::make_shared<grammar::TokenGrammar>(std::move(g), std::move(v));
}

void Engine::prepare_mask(Active& a) {
  if (!a.mask_ready) a.matcher->fill_mask(a.mask.data());
  a.mask_ready = true;
  a.sampler->set_step_mask(a.mask.data());
}

void Engine::fill_masks(const std::vector<Active*>& batch, const std::vector<int64_t>& counts) {
  for (size_t i = 0; i < batch.size(); ++i) {
    Active& a = *batch[i];
    const bool due = !a.verify.empty() || a.n_fed + counts[i] == static_cast<int64_t>(a.tokens.size());
    if (!a.matcher || !due || a.mask_ready) continue;
    try {
      a.matcher->fill_mask(a.mask.data());
      a.mask_ready = true;
    } catch (...) {  // nothing may escape this thread
      a.mask_ready = false;  // filled again (and the error reported) on the scheduler thread
    }
  }
}

bool Engine::accept_grammar(Active& a, int32_t token) {
  a.mask_ready = false;
  a.sampler->set_step_mask(nullptr);
  if (a.matcher->accept(token)) return true;
  finish(a, FinishReason::kError, cat("engine: the grammar does not allow token ", token));
  return false;
}

std::vector<int32_t> Engine::forced_drafts(Active& a, int64_t k) {
  if (k <= 0 || !tok_) return {};
  std::string text = a.matcher->forced_bytes(256);
  text.resize(text.size() - incomplete_utf8_tail(text));  // whole characters only
  if (text.empty() || find_invalid_utf8(text) != std::string::npos) return {};
  std::vector<int32_t> ids = tok_->encode(text, /*add_special=*/false);
  if (static_cast<int64_t>(ids.size()) > k) ids.resize(static_cast<size_t>(k));
  return ids;
}

}  // namespace lfm
