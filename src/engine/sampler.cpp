#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/top_candidates.h"

namespace lfm {

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

void SamplingParams::validate(int64_t vocab) const {
  LFM_CHECK(std::isfinite(temperature) && temperature >= 0 && temperature <= 100,
            "sampling: temperature must be in [0, 100], got ", temperature);
  LFM_CHECK(top_k >= 0, "sampling: top_k must be >= 0, got ", top_k);
  LFM_CHECK(top_p > 0 && top_p <= 1, "sampling: top_p must be in (0, 1], got ", top_p);
  LFM_CHECK(min_p >= 0 && min_p < 1, "sampling: min_p must be in [0, 1), got ", min_p);
  LFM_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0 && repetition_penalty <= 100,
            "sampling: repetition_penalty must be in (0, 100], got ", repetition_penalty);
  LFM_CHECK(presence_penalty >= -2 && presence_penalty <= 2, "sampling: presence_penalty must be in [-2, 2], got ",
            presence_penalty);
  LFM_CHECK(frequency_penalty >= -2 && frequency_penalty <= 2,
            "sampling: frequency_penalty must be in [-2, 2], got ", frequency_penalty);
  LFM_CHECK(top_logprobs >= 0 && top_logprobs <= 20, "sampling: top_logprobs must be in [0, 20], got ",
            top_logprobs);
  for (const auto& [id, bias] : logit_bias) {
    LFM_CHECK(id >= 0 && id < vocab, "sampling: logit_bias token id ", id, " is outside the vocabulary [0, ", vocab,
              ")");
    LFM_CHECK(bias >= -100 && bias <= 100, "sampling: logit_bias for token ", id, " must be in [-100, 100], got ",
              bias);
  }
}

Sampler::Sampler(const SamplingParams& p, std::span<const int32_t> prompt, int64_t vocab,
                 const std::vector<uint8_t>* allowed)
    : p_(p), vocab_(vocab), allowed_(allowed), rng_(p.seed ? *p.seed : std::random_device{}()) {
  p_.validate(vocab);
  LFM_CHECK(!allowed || static_cast<int64_t>(allowed->size()) >= vocab, "sampling: allowed-id mask of ",
            allowed ? allowed->size() : 0, " entries for a vocabulary of ", vocab);
  // One bias per id (a repeated id's biases summed in order), so that the edits a device applies
  // (logit_edits) are the very sums process() adds.
  std::vector<std::pair<int32_t, float>> bias;
  for (const auto& [id, b] : p_.logit_bias) {
    auto it = std::find_if(bias.begin(), bias.end(), [id = id](const auto& e) { return e.first == id; });
    if (it == bias.end())
      bias.push_back({id, b});
    else
      it->second += b;
  }
  p_.logit_bias = std::move(bias);
  if (p_.repetition_penalty != 1.0f) {
    seen_.assign(static_cast<size_t>(vocab), 0);
    for (int32_t t : prompt)
      if (t >= 0 && t < vocab) mark_seen(t);
  }
  work_.resize(static_cast<size_t>(vocab));
}

void Sampler::process(const float* logits) {
  float* w = work_.data();
  std::copy(logits, logits + vocab_, w);
  for (const auto& [id, bias] : p_.logit_bias) w[id] += bias;
  if (p_.repetition_penalty != 1.0f)
    for (int64_t i = 0; i < vocab_; ++i)
      if (seen_[i]) w[i] = w[i] > 0 ? w[i] / p_.repetition_penalty : w[i] * p_.repetition_penalty;
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)
    for (const auto& [id, n] : out_count_) w[id] -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(n);
}

int32_t Sampler::greedy_choice() const {
  const float* w = work_.data();
  int64_t best = -1;
  for (int64_t i = 0; i < vocab_; ++i)
    if (allowed(i) && (best < 0 || w[i] > w[best])) best = i;
  LFM_CHECK(best >= 0, "sampling: no token is allowed");
  return static_cast<int32_t>(best);
}

void Sampler::distribution() {
  const float* w = work_.data();
  cand_.clear();
  for (int64_t i = 0; i < vocab_; ++i)
    if (allowed(i)) cand_.push_back({w[i] / p_.temperature, static_cast<int32_t>(i)});
  LFM_CHECK(!cand_.empty(), "sampling: no token is allowed");
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < cand_.size()) {
    const auto keep = static_cast<std::ptrdiff_t>(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
    cand_.resize(static_cast<size_t>(keep));
  } else {
    sort_by_value(cand_, sort_scratch_);
  }
  shape(0.0);
}

std::optional<double> Sampler::shape(double tail) {
  if (p_.top_k > 0) {
    if (cand_.size() >= static_cast<size_t>(p_.top_k)) {
      cand_.resize(static_cast<size_t>(p_.top_k));
      tail = 0;
    } else if (tail > 0) {
      return std::nullopt;  // the k best reach past cand_
    }
  }
  // Softmax over the kept candidates (sorted, largest first) and the tail.
  const float mx = cand_[0].first;
  double sum = 0;
  for (auto& c : cand_) {
    c.first = std::exp(c.first - mx);
    sum += c.first;
  }
  sum += tail;
  for (auto& c : cand_) c.first = static_cast<float>(c.first / sum);
  double rest = tail / sum;
  if (p_.min_p > 0) {
    const float floor = cand_[0].first * p_.min_p;
    if (rest > 0 && cand_.back().first >= floor) return std::nullopt;  // tail ids may pass the floor
    while (cand_.size() > 1 && cand_.back().first < floor) cand_.pop_back();
    rest = 0;
  }
  if (p_.top_p < 1) {
    double acc = 0;
    size_t n = 0;
    bool reached = false;
    while (n < cand_.size() && !reached) {
      acc += cand_[n++].first;
      reached = acc >= p_.top_p;
    }
    if (!reached && rest > 0) return std::nullopt;  // the nucleus reaches into the tail
    cand_.resize(n);
    if (reached) rest = 0;
  }
  double total = rest;
  for (const auto& c : cand_) total += c.first;
  for (auto& c : cand_) c.first = static_cast<float>(c.first / total);
  return rest / total;
}

std::optional<int32_t> Sampler::draw(const TokenProbs& probs, double u, double rest) {
  double total = rest;
  for (const auto& c : probs) total += c.first;
  double r = u * total;
  for (const auto& c : probs) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  if (rest > 0) return std::nullopt;
  return probs.back().second;
}

SampleResult Sampler::sample(const float* logits, TokenProbs* dist) {
  process(logits);
  if (dist) dist->clear();
  if (p_.temperature == 0.0f) return finish(logits, greedy_choice());
  if (dist || p_.top_k > kMaxCandidates) {  // the whole distribution (a draft's q)
    distribution();
    if (dist) *dist = cand_;
    return finish(logits, *draw(cand_, uniform()));
  }
  // The best candidates first, as a device sends them: a row whose choice they settle (most rows
  // of a trained model) needs no sort of the whole vocabulary.
  best_.resize(static_cast<size_t>(kMaxCandidates));
  const float tail = select_top_candidates(work_.data(), vocab_, [this](int64_t i) { return allowed(i); },
                                           kMaxCandidates, tail_temperature(kMaxCandidates), best_.data(), scratch_);
  LFM_CHECK(best_[0].id >= 0, "sampling: no token is allowed");
  return finish(logits, from_candidates(best_, tail, [](float*) {}));  // work_ holds the row
}

SampleResult Sampler::sample_shortlist(std::span<const Candidate> best, float tail,
                                       const std::function<void(float*)>& full_row, double logsumexp) {
  LFM_CHECK(!best.empty() && best[0].id >= 0, "sampling: no token is allowed");
  bool fetched = false;
  auto fetch = [&](float* row) {
    full_row(row);
    fetched = true;
  };
  int32_t token = -1;
  if (p_.temperature == 0.0f) {
    // The best candidate the step's mask allows is the row's greedy choice: every id left out is
    // no larger (and, when equal, of a higher id). Without one among them, the whole row.
    for (const Candidate& c : best)
      if (c.id >= 0 && allowed(c.id)) {
        token = c.id;
        break;
      }
    if (token < 0) {
      fetch(work_.data());
      token = greedy_choice();
    }
  } else {
    token = from_candidates(best, tail, fetch);
  }
  // With logprobs there are no edits: a fetched row is the raw row, and a token chosen among the
  // candidates has its raw logit there.
  if (fetched || !wants_logprobs()) return finish(fetched ? work_.data() : nullptr, token);
  LFM_CHECK(std::isfinite(logsumexp), "sampling: logprobs from candidates without the row's logsumexp");
  return finish_from_candidates(best, token, logsumexp);
}

SampleResult Sampler::finish_from_candidates(std::span<const Candidate> best, int32_t token, double logsumexp) {
  // finish()'s logprobs, read from the candidates: they are the row's best allowed ids in
  // finish()'s order, and the chosen token is one of them.
  SampleResult res;
  res.token = token;
  const auto chosen = std::find_if(best.begin(), best.end(), [&](const Candidate& c) { return c.id == token; });
  LFM_CHECK(chosen != best.end(), "sampling: token ", token, " is not among the candidates its logprob is read from");
  res.logprob = static_cast<float>(static_cast<double>(chosen->value) - logsumexp);
  for (size_t i = 0; i < best.size() && i < static_cast<size_t>(p_.top_logprobs) && best[i].id >= 0; ++i)
    res.top.push_back({best[i].id, static_cast<float>(static_cast<double>(best[i].value) - logsumexp)});
  ++out_count_[res.token];
  mark_seen(res.token);
  return res;
}

int32_t Sampler::from_candidates(std::span<const Candidate> best, float tail,
                                 const std::function<void(float*)>& full_row) {
  // The candidates the step's mask allows (every one without a grammar), as the whole-row path
  // holds them: logit / T, best first.
  cand_.clear();
  size_t listed = 0;
  for (const Candidate& c : best) {
    if (c.id < 0) break;
    ++listed;
    if (allowed(c.id)) cand_.push_back({c.value / p_.temperature, c.id});
  }
  const bool every_id = listed < best.size();  // the candidates are every allowed id: no tail
  const double u = uniform();
  if (!cand_.empty() && (!step_mask_ || every_id)) {
    if (const auto rest = shape(every_id ? 0.0 : static_cast<double>(tail)))
      if (const auto token = draw(cand_, u, *rest)) return *token;
  } else if (!cand_.empty()) {
    // Under a grammar, the share of the tail the mask allows is unknown: between none and all
    // of it. A heavier tail moves the draw only toward later candidates (and widens top-p's
    // nucleus), so when both ends give the same candidate, every mass between does. The tail
    // is relative to the row's best value, the softmax here to the best allowed candidate's.
    const TokenProbs allowed_candidates = cand_;
    const double most = static_cast<double>(tail) *
                        std::exp(static_cast<double>(best[0].value / p_.temperature) - allowed_candidates[0].first) *
                        (1 + 1e-6);
    std::optional<int32_t> none, all;
    if (const auto rest = shape(0.0)) none = draw(cand_, u, *rest);
    cand_ = allowed_candidates;
    if (const auto rest = shape(most)) all = draw(cand_, u, *rest);
    if (none && all && *none == *all) return *none;
  }
  // The choice depends on ids past the candidates: the whole row, and the same draw.
  full_row(work_.data());
  distribution();
  return *draw(cand_, u);
}

bool Sampler::samples_from_shortlist(int64_t n) const {
  if (n <= 0 || p_.top_k > n) return false;  // (a grammar's requests too: their mask is applied on the host)
  // Logprobs are of the raw row: the candidates serve them where there are no edits.
  if (wants_logprobs() && (p_.top_logprobs > n || edits_logits())) return false;
  return !plain_greedy();
}

void Sampler::logit_edits(std::vector<LogitEdit>& out) const {
  out.clear();
  std::unordered_map<int32_t, size_t> at;
  auto edit = [&](int32_t id) -> LogitEdit& {
    const auto [it, fresh] = at.try_emplace(id, out.size());
    if (fresh) out.push_back(LogitEdit{0, id});
    return out[it->second];
  };
  for (const auto& [id, bias] : p_.logit_bias) edit(id).add = bias;
  if (p_.repetition_penalty != 1.0f)
    for (int32_t id : seen_ids_) edit(id).penalty = p_.repetition_penalty;
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)
    for (const auto& [id, n] : out_count_) edit(id).sub = p_.presence_penalty + p_.frequency_penalty * static_cast<float>(n);
}

SampleResult Sampler::verify(const float* logits, int32_t draft, const TokenProbs* q, bool& accepted) {
  process(logits);
  if (p_.temperature == 0.0f) {
    const int32_t t = greedy_choice();
    accepted = t == draft;
    return finish(logits, t);
  }
  distribution();
  // q as a dense row (work_ is free once the distribution is built): q[id], 0 elsewhere.
  float* qd_of = work_.data();
  std::fill(work_.begin(), work_.end(), 0.0f);
  if (q)
    for (const auto& c : *q) qd_of[c.second] = c.first;
  else
    qd_of[draft] = 1.0f;
  double pd = 0;
  for (const auto& c : cand_)
    if (c.second == draft) pd = c.first;
  const double qd = qd_of[draft];
  const double u = uniform();
  accepted = qd > 0 && u * qd < pd;
  if (accepted) return finish(logits, draft);
  // The residual max(0, p - q) over p's support (outside it p is 0).
  residual_.clear();
  for (const auto& c : cand_) {
    const double rest = static_cast<double>(c.first) - qd_of[c.second];
    if (rest > 0) residual_.push_back({static_cast<float>(rest), c.second});
  }
  return finish(logits, *draw(residual_.empty() ? cand_ : residual_, uniform()));
}

Sampler Sampler::fork() {
  Sampler copy = *this;
  copy.rng_.seed(rng_());
  copy.step_mask_ = nullptr;  // a drafter's choices are not constrained (verification is)
  return copy;
}

SampleResult Sampler::finish(const float* logits, int32_t token) {
  SampleResult res;
  res.token = token;
  if (p_.logprobs || p_.top_logprobs > 0) {
    // log-softmax of the raw logits over the whole vocabulary.
    const double lse = row_logsumexp(logits, vocab_);
    res.logprob = static_cast<float>(logits[res.token] - lse);
    if (p_.top_logprobs > 0) {
      cand_.clear();  // alternatives among the allowed ids only (others have no text to show)
      for (int64_t i = 0; i < vocab_; ++i)
        if (!allowed_ || (*allowed_)[i]) cand_.push_back({logits[i], static_cast<int32_t>(i)});
      const size_t k = std::min(cand_.size(), static_cast<size_t>(p_.top_logprobs));
      std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(),
                        [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
      for (size_t i = 0; i < k; ++i) res.top.push_back({cand_[i].second, static_cast<float>(cand_[i].first - lse)});
    }
  }
  ++out_count_[res.token];
  mark_seen(res.token);
  return res;
}

bool Sampler::plain_greedy() const {
  return !masked_ && p_.temperature == 0.0f && !edits_logits() && !wants_logprobs();
}

bool Sampler::edits_logits() const {
  return !p_.logit_bias.empty() || p_.repetition_penalty != 1.0f || p_.presence_penalty != 0.0f ||
         p_.frequency_penalty != 0.0f;
}

SampleResult Sampler::accept(int32_t token) {
  LFM_CHECK(token >= 0 && token < vocab_, "sampling: no token is allowed");
  SampleResult res;
  res.token = token;
  ++out_count_[token];
  mark_seen(token);
  return res;
}

}  // namespace lfm
