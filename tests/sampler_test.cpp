// Per-request sampling (logit_bias, repetition / presence / frequency penalties, the allowed-id
// mask, temperature / top-k / top-p / min-p, seeds, logprobs), stop strings across token
// boundaries, and the engine's text stream with a tokenizer: stop strings never emitted, stop ids
// end generation, pieces add up to the decoded text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/stop_strings.h"
#include "kernels/cpu_backend.h"
#include "kernels/reference_backend.h"
#include "kernels/top_candidates.h"
#include "model_test_util.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

TEST(Sampler, GreedyTakesTheArgmaxAfterBiasAndPenalties) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.5f, -1.0f};
  EXPECT_EQ(Sampler(SamplingParams{}, {}, 4).sample(logits.data()).token, 1);
  SamplingParams bias;
  bias.logit_bias = {{1, -1.0f}};  // 3 → 2: id 2 (2.5) wins
  EXPECT_EQ(Sampler(bias, {}, 4).sample(logits.data()).token, 2);
  // Repetition penalty (HF rule): a positive logit of a seen id is divided, a negative one multiplied.
  SamplingParams rep;
  rep.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {1};
  EXPECT_EQ(Sampler(rep, prompt, 4).sample(logits.data()).token, 2);  // 3 / 2 = 1.5 < 2.5
  // Presence / frequency (OpenAI rule) count only generated ids: the first choice is unaffected,
  // then id 1 pays 0.4 + 0.3 per occurrence.
  SamplingParams pf;
  pf.presence_penalty = 0.4f;
  pf.frequency_penalty = 0.3f;
  Sampler s(pf, prompt, 4);
  EXPECT_EQ(s.sample(logits.data()).token, 1);  // 3.0
  EXPECT_EQ(s.sample(logits.data()).token, 2);  // 3.0 - 0.7 = 2.3 < 2.5
  EXPECT_EQ(s.sample(logits.data()).token, 1);  // id 2 pays too: 2.5 - 0.7 = 1.8 < 2.3
}

TEST(Sampler, AllowedMaskIsRespected) {
  const std::vector<float> logits = {5.0f, 1.0f, 4.0f};
  const std::vector<uint8_t> allowed = {0, 1, 1};
  EXPECT_EQ(Sampler(SamplingParams{}, {}, 3, &allowed).sample(logits.data()).token, 2);
  SamplingParams hot;
  hot.temperature = 5.0f;
  hot.seed = 3;
  Sampler s(hot, {}, 3, &allowed);
  for (int i = 0; i < 200; ++i) EXPECT_NE(s.sample(logits.data()).token, 0);
  const std::vector<uint8_t> none = {0, 0, 0};
  EXPECT_THROW(Sampler(SamplingParams{}, {}, 3, &none).sample(logits.data()), Error);
}

TEST(Sampler, FiltersKeepOnlyTheirCandidates) {
  const std::vector<float> logits = {2.0f, 1.9f, 0.0f, -1.0f, 1.0f};
  auto seen = [&](SamplingParams p) {
    std::map<int32_t, int> n;
    p.temperature = 1.0f;
    p.seed = 11;
    Sampler s(p, {}, 5);
    for (int i = 0; i < 2000; ++i) ++n[s.sample(logits.data()).token];
    return n;
  };
  SamplingParams k2;
  k2.top_k = 2;
  auto n = seen(k2);
  EXPECT_EQ(n.size(), 2u);
  EXPECT_TRUE(n.count(0) && n.count(1));
  SamplingParams minp;
  minp.min_p = 0.3f;  // keeps ids with p >= 0.3 × p(0): 0, 1 and 4 (p4 / p0 = e^-1 = 0.37)
  n = seen(minp);
  EXPECT_EQ(n.size(), 3u);
  EXPECT_TRUE(n.count(4));
  SamplingParams topp;
  topp.top_p = 0.5f;  // the first two already carry more than half the mass; id 0 alone does not
  n = seen(topp);
  EXPECT_EQ(n.size(), 2u);
  // All ids appear without filters; the proportions follow the softmax.
  n = seen(SamplingParams{});
  EXPECT_EQ(n.size(), 5u);
  EXPECT_NEAR(n[0] / 2000.0, std::exp(2.0) / (std::exp(2.0) + std::exp(1.9) + 1 + std::exp(-1.0) + std::exp(1.0)), 0.03);
}

TEST(Sampler, SameSeedSameTokens) {
  const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.25f, 0.15f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p, {}, 5), b(p, {}, 5);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.sample(logits.data()).token);
    tb.push_back(b.sample(logits.data()).token);
  }
  EXPECT_EQ(ta, tb);
  p.seed = 43;
  Sampler c(p, {}, 5);
  std::vector<int32_t> tc;
  for (int i = 0; i < 50; ++i) tc.push_back(c.sample(logits.data()).token);
  EXPECT_NE(ta, tc);
}

// A request's filters, for the shortlist tests.
SamplingParams with(float t, int k, float top_p, float min_p) {
  SamplingParams p;
  p.temperature = t, p.top_k = k, p.top_p = top_p, p.min_p = min_p;
  return p;
}

std::vector<uint8_t> every_seventh_id_disallowed(int64_t vocab) {
  std::vector<uint8_t> allowed(static_cast<size_t>(vocab), 1);
  for (int64_t i = 0; i < vocab; i += 7) allowed[static_cast<size_t>(i)] = 0;
  return allowed;
}

// What a device sends down for a sampled row (its best candidates after the request's edits, and
// the mass of the rest) gives the token sample() gives on the whole row, for every kind of
// request, the same seed, flat rows (draws past the candidates: the whole row is fetched) and
// peaked ones (the candidates suffice).
TEST(Sampler, ShortlistGivesTheTokensOfTheWholeRow) {
  const int64_t V = 3000, n = 16;
  ThreadPool pool(1);
  ReferenceBackend ref(pool);
  const std::vector<uint8_t> allowed = every_seventh_id_disallowed(V);
  std::vector<SamplingParams> kinds = {with(0.8f, 0, 1.0f, 0.0f), with(1.0f, 0, 0.9f, 0.0f), with(0.7f, 0, 1.0f, 0.05f),
                                       with(1.2f, 12, 1.0f, 0.0f), with(1.0f, 16, 0.8f, 0.02f), with(0.9f, 0, 0.95f, 0.0f)};
  kinds.back().repetition_penalty = 1.3f, kinds.back().presence_penalty = 0.5f, kinds.back().frequency_penalty = 0.2f;
  kinds.back().logit_bias = {{5, 3.0f}, {9, -2.0f}, {5, 0.5f}};  // a repeated id: its biases add up
  SamplingParams greedy_penalised = with(0.0f, 0, 1.0f, 0.0f);
  greedy_penalised.repetition_penalty = 1.5f;
  kinds.push_back(greedy_penalised);
  const std::vector<int32_t> prompt = {1, 2, 3, 5, 8, 13, 21};
  for (size_t k = 0; k < kinds.size(); ++k) {
    SamplingParams p = kinds[k];
    p.seed = 1234 + k;
    Sampler whole(p, prompt, V, &allowed), shortlisted(p, prompt, V, &allowed);
    ASSERT_TRUE(shortlisted.samples_from_shortlist(n)) << "kind " << k;
    std::mt19937 rng(static_cast<uint32_t>(k));
    std::normal_distribution<float> normal;
    int fetched = 0, steps = 300;
    std::vector<LogitEdit> edits;
    std::vector<Candidate> best(n);
    float tail = 0;
    for (int step = 0; step < steps; ++step) {
      const float scale = step % 2 ? 0.3f : 6.0f;  // flat rows and peaked rows
      std::vector<float> logits(V);
      for (float& x : logits) x = normal(rng) * scale;
      std::vector<float> row = logits;
      shortlisted.logit_edits(edits);
      ref.edit_logits(row.data(), V, edits.data(), static_cast<int64_t>(edits.size()));
      const CandidateRow listed{0, p.temperature};
      ref.top_candidates(row.data(), V, &listed, 1, allowed.data(), n, best.data(), &tail);
      const int32_t want = whole.sample(logits.data()).token;
      const int32_t got = shortlisted.sample_shortlist(best, tail, [&](float* dst) {
        ++fetched;
        std::copy(row.begin(), row.end(), dst);
      }).token;
      ASSERT_EQ(got, want) << "kind " << k << " step " << step;
    }
    if (p.top_k > 0 || p.temperature == 0) {
      EXPECT_EQ(fetched, 0) << "kind " << k << ": the k best are all among the candidates";
    } else {
      EXPECT_GT(fetched, 0) << "kind " << k;  // flat rows reach past the candidates
      EXPECT_LT(fetched, steps) << "kind " << k;
    }
  }
}

// Under a grammar (a step mask applied on the host after the step) the candidates give the
// whole row's tokens too: the mask's share of the tail is bounded by none and all of it, and
// the row is fetched when the draw differs between the two (or the mask allows no candidate).
TEST(Sampler, ShortlistUnderAStepMaskGivesTheTokensOfTheWholeRow) {
  const int64_t V = 3000, n = 16;
  ThreadPool pool(1);
  ReferenceBackend ref(pool);
  const std::vector<uint8_t> allowed = every_seventh_id_disallowed(V);
  const std::vector<SamplingParams> kinds = {with(0.8f, 0, 1.0f, 0.0f), with(1.0f, 0, 0.9f, 0.0f),
                                             with(0.7f, 0, 1.0f, 0.05f), with(1.2f, 12, 1.0f, 0.0f),
                                             with(1.0f, 16, 0.8f, 0.02f), with(0.0f, 0, 1.0f, 0.0f)};
  for (size_t k = 0; k < kinds.size(); ++k) {
    SamplingParams p = kinds[k];
    p.seed = 77 + k;
    Sampler whole(p, {}, V, &allowed), shortlisted(p, {}, V, &allowed);
    whole.use_step_masks(), shortlisted.use_step_masks();
    ASSERT_TRUE(shortlisted.samples_from_shortlist(n)) << "kind " << k;
    std::mt19937 rng(static_cast<uint32_t>(100 + k));
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> coin;
    int fetched = 0, peaked_dense = 0, peaked_dense_fetched = 0;
    const int steps = 400;
    std::vector<Candidate> best(n);
    std::vector<uint64_t> mask((V + 63) / 64);
    float tail = 0;
    for (int step = 0; step < steps; ++step) {
      const float scale = step % 2 ? 0.3f : 6.0f;  // flat rows and peaked rows
      std::vector<float> logits(V);
      for (float& x : logits) x = normal(rng) * scale;
      const float density = step % 3 == 0 ? 0.9f : step % 3 == 1 ? 0.3f : 0.02f;
      std::fill(mask.begin(), mask.end(), 0);
      for (int64_t i = 0; i < V; ++i)
        if (coin(rng) < density) mask[static_cast<size_t>(i >> 6)] |= uint64_t{1} << (i & 63);
      const CandidateRow listed{0, shortlisted.tail_temperature(n)};
      ref.top_candidates(logits.data(), V, &listed, 1, allowed.data(), n, best.data(), &tail);
      whole.set_step_mask(mask.data()), shortlisted.set_step_mask(mask.data());
      const int32_t want = whole.sample(logits.data()).token;
      const int before = fetched;
      const int32_t got = shortlisted.sample_shortlist(best, tail, [&](float* dst) {
        ++fetched;
        std::copy(logits.begin(), logits.end(), dst);
      }).token;
      if (scale > 1 && density == 0.9f) peaked_dense++, peaked_dense_fetched += fetched - before;
      ASSERT_EQ(got, want) << "kind " << k << " step " << step;
      ASSERT_TRUE(mask[static_cast<size_t>(got >> 6)] >> (got & 63) & 1);
      whole.set_step_mask(nullptr), shortlisted.set_step_mask(nullptr);
    }
    EXPECT_GT(fetched, 0) << "kind " << k;  // sparse masks leave no candidate now and then
    // Peaked rows under masks that allow most ids: the candidates settle most draws (0 to 15 of
    // 67 fetched); not top_k 16 of 16 candidates, which needs all of them allowed.
    if (p.top_k != n) {
      EXPECT_LT(peaked_dense_fetched, peaked_dense / 3) << "kind " << k;
    }
  }
}

// The radix sort the whole-row path orders the vocabulary with: the order of a comparison sort
// by value then id, with many ties, both zeros and infinities, below and above its cut-over size.
TEST(Sampler, RadixSortByValueIsTheComparisonSort) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (size_t n : {size_t{100}, size_t{5000}, size_t{70001}}) {
    TokenProbs v, scratch;
    for (size_t i = 0; i < n; ++i) {
      float x = std::round(normal(rng) * 4.0f) / 4.0f;  // ties
      if (i % 97 == 0) x = (i % 194 == 0) ? -0.0f : 0.0f;
      if (i % 1001 == 0) x = (i % 2002 == 0) ? -INFINITY : INFINITY;
      v.push_back({x, static_cast<int32_t>(i)});
    }
    TokenProbs want = v;
    std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    sort_by_value(v, scratch);
    ASSERT_EQ(v.size(), want.size());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[i].second, want[i].second) << "n " << n << " rank " << i;
  }
}

TEST(Sampler, LogprobsAreThoseOfTheRawDistribution) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  SamplingParams p;
  p.logprobs = true;
  p.top_logprobs = 2;
  p.logit_bias = {{0, 10.0f}};  // changes the choice, not the reported distribution
  const SampleResult r = Sampler(p, {}, 3).sample(logits.data());
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_EQ(r.token, 0);
  EXPECT_NEAR(r.logprob, 1.0 - lse, 1e-5);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 2);
  EXPECT_NEAR(r.top[0].logprob, 3.0 - lse, 1e-5);
  EXPECT_EQ(r.top[1].token, 1);
}

TEST(Sampler, BadParametersNameTheField) {
  auto message = [](SamplingParams p) {
    try {
      p.validate(10);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(message(p).find("temperature"), std::string::npos);
  p = {};
  p.top_p = 1.5f;
  EXPECT_NE(message(p).find("top_p"), std::string::npos);
  p = {};
  p.presence_penalty = 3;
  EXPECT_NE(message(p).find("presence_penalty"), std::string::npos);
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_NE(message(p).find("logit_bias token id 10"), std::string::npos);
  p = {};
  p.top_logprobs = 21;
  EXPECT_NE(message(p).find("top_logprobs"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(message(p).find("repetition_penalty"), std::string::npos);
  EXPECT_EQ(message(SamplingParams{}), "");
}

TEST(StopStrings, MatchesAcrossPiecesAndHoldsBackPrefixes) {
  StopStrings s({"</end>", "STOP"});
  EXPECT_EQ(s.push("Hello </"), "Hello ");  // "</" might begin "</end>"
  EXPECT_EQ(s.push("e"), "");
  EXPECT_EQ(s.push("x"), "</ex");  // not a stop after all
  EXPECT_EQ(s.push(" ST"), " ");
  EXPECT_EQ(s.push("OP and more"), "");
  EXPECT_TRUE(s.matched());
  EXPECT_EQ(s.matched_string(), "STOP");
  EXPECT_EQ(s.push("ignored"), "");
  EXPECT_EQ(s.flush(), "");
  StopStrings none({});
  EXPECT_EQ(none.push("abc"), "abc");
  StopStrings tail({"xyz"});
  EXPECT_EQ(tail.push("abcx"), "abc");
  EXPECT_EQ(tail.flush(), "x");  // generation ended without the stop string
  StopStrings earliest({"bc", "ab"});
  EXPECT_EQ(earliest.push("zabc"), "z");
  EXPECT_EQ(earliest.matched_string(), "ab");
}

// The engine with a tokenizer: text pieces, stop strings and stop ids.
class EngineTextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_engine_text");
    test::write_text_model(dir_->str());
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override {
    model_ = load_model(dir_->str());
    tok_ = load_tokenizer(dir_->str());
    backend_ = make_cpu_backend(pool_);
    EngineOptions o;
    o.state.ctx_size = 256;
    o.state.parallel = 2;
    engine_ = std::make_unique<Engine>(*model_, *backend_, tok_.get(), o);
  }
  struct Out {
    std::vector<int32_t> ids;
    std::string text, stop;
    FinishReason finish = FinishReason::kNone;
  };
  Out run(Request r) {
    Out o;
    auto s = engine_->submit(std::move(r));
    Event ev;
    while (s->next(ev)) {
      if (ev.kind == Event::Kind::kToken) o.ids.push_back(ev.token);
      o.text += ev.text;
      if (ev.kind == Event::Kind::kDone) {
        o.finish = ev.finish;
        o.stop = ev.stop;
      }
    }
    return o;
  }
  Request prompt(int64_t n) {
    Request r;
    r.prompt = tok_->encode("Once upon a time, the model said");
    r.max_tokens = n;
    r.ignore_eos = true;
    return r;
  }
  static test::TempDir* dir_;
  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Engine> engine_;
};
test::TempDir* EngineTextTest::dir_ = nullptr;

TEST_F(EngineTextTest, PiecesAddUpToTheDecodedText) {
  const Out o = run(prompt(40));
  ASSERT_EQ(o.ids.size(), 40u);
  EXPECT_EQ(o.text, tok_->decode(o.ids, /*skip_special=*/true));
  EXPECT_EQ(o.finish, FinishReason::kLength);
}

TEST_F(EngineTextTest, StopStringsEndGenerationAndAreNeverEmitted) {
  const Out full = run(prompt(40));
  ASSERT_GE(full.text.size(), 12u);
  // A stop string from the middle of the text (3 bytes, likely spanning token boundaries).
  const size_t at = full.text.size() / 2;
  size_t start = at;
  while (start > 0 && (static_cast<unsigned char>(full.text[start]) & 0xC0) == 0x80) --start;
  size_t end = start + 1;
  while (end < full.text.size() && end < start + 3) {
    ++end;
    while (end < full.text.size() && (static_cast<unsigned char>(full.text[end]) & 0xC0) == 0x80) ++end;
  }
  const std::string stop = full.text.substr(start, end - start);
  Request r = prompt(40);
  r.stop = {stop};
  const Out o = run(r);
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.stop, stop);
  EXPECT_EQ(o.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_LT(o.ids.size(), full.ids.size());
  EXPECT_EQ(std::vector<int32_t>(full.ids.begin(), full.ids.begin() + o.ids.size()), o.ids);
}

TEST_F(EngineTextTest, StopIdsEndGenerationWithoutTheirText) {
  const Out full = run(prompt(20));
  Request r = prompt(20);
  r.stop_ids = {full.ids[5]};
  const Out o = run(r);
  EXPECT_EQ(o.finish, FinishReason::kStop);
  size_t first = 0;
  while (full.ids[first] != full.ids[5]) ++first;
  ASSERT_EQ(o.ids.size(), first + 1);  // the stop id is reported as a token...
  EXPECT_EQ(o.text, tok_->decode(std::vector<int32_t>(o.ids.begin(), o.ids.end() - 1), true));  // ...not as text
}

}  // namespace
}  // namespace lfm
