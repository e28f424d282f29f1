// Structured output in the engine: a grammar that allows every byte string changes nothing
// (greedy and sampled); under a grammar, greedy decoding picks the highest-logit token among
// those a brute-force check allows, at every step; sampled outputs at temperature 1 always stay
// in the language, alone, in batches and with speculative drafts; generation stops when the
// grammar's text is complete.
#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/token_mask.h"
#include "engine_test_util.h"
#include "fake_device_backend.h"
#include "grammar/grammar.h"
#include "grammar/grammar_builder.h"
#include "grammar/token_grammar.h"
#include "server/structured_output.h"
#include "grammar_test_util.h"
#include "model_test_util.h"
#include "test_backends.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm {
namespace {

using test::collect;
using test::Result;

class EngineGrammarTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_grammar");
    test::write_text_model(dir_->str());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    LoadOptions load;
    std::string why;
    backend_ = test::make_named_backend("cpu", pool_, load, &why);
    ASSERT_TRUE(backend_) << why;
    model_ = load_model(dir_->str(), load);
    tok_ = load_tokenizer(dir_->str());
  }
  EngineOptions options(int64_t parallel, int64_t drafts = 0) const {
    EngineOptions o;
    o.state.ctx_size = 256;
    o.state.parallel = parallel;
    o.state.type = DType::F32;
    o.state.draft_tokens = drafts;
    return o;
  }
  std::string text_of(const std::vector<int32_t>& ids) const {
    std::string s;
    for (int32_t id : ids) tok_->append_token_bytes(id, s);
    return s;
  }
  Request request(const std::string& prompt, int64_t n, float temperature, uint64_t seed) const {
    Request r;
    r.prompt = tok_->encode(prompt, false);
    r.max_tokens = n;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    return r;
  }
  // Generated ids without the final stop id, if any.
  std::vector<int32_t> content(const Result& r) const {
    std::vector<int32_t> ids = r.tokens;
    if (!ids.empty() && r.finish == FinishReason::kStop && tok_->is_special(ids.back())) ids.pop_back();
    return ids;
  }

  static test::TempDir* dir_;
  ThreadPool pool_{2};
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
};
test::TempDir* EngineGrammarTest::dir_ = nullptr;

const char* kPrompts[] = {"Hello", "The weather today is", "{\"a\": 1", "x = (1 + 2) *", "Once upon a time"};

TEST_F(EngineGrammarTest, AGrammarAllowingEveryByteChangesNothing) {
  // root ::= [\x00-\xFF] root | <|each added token|> root | ""   (bytes, not code points)
  grammar::GrammarBuilder b;
  grammar::ByteSet all;
  all.add_range(0, 255);
  const int32_t root = b.rule("root");
  const grammar::Element self{grammar::Element::Kind::kRule, root};
  std::vector<grammar::Sequence> alts = {{b.byte_set(all), self}, {}};
  for (const auto& a : tok_->spec().added_tokens) alts.push_back({b.token(a.content), self});
  b.define(root, alts);
  auto g = std::make_shared<const grammar::Grammar>(b.finish("root"));
  Engine plain(*model_, *backend_, tok_.get(), options(4));
  Engine constrained(*model_, *backend_, tok_.get(), options(4));
  auto tg = constrained.compile_grammar(g);
  for (float temperature : {0.0f, 1.0f}) {
    for (size_t i = 0; i < std::size(kPrompts); ++i) {
      Request r = request(kPrompts[i], 24, temperature, 100 + i);
      r.sampling.top_k = temperature > 0 ? 50 : 0;
      const Result want = collect(*plain.submit(r));
      r.grammar = tg;
      const Result got = collect(*constrained.submit(r));
      EXPECT_EQ(got.tokens, want.tokens) << kPrompts[i] << " at temperature " << temperature;
      EXPECT_EQ(got.finish, want.finish);
    }
  }
}

// At every step the chosen token is the argmax of the model's logits over the ids the grammar
// allows, found by brute force: the text so far plus the token's bytes is a prefix of the
// language (the end-of-sequence id: the text is complete).
TEST_F(EngineGrammarTest, GreedyPicksTheHighestLogitAllowedToken) {
  auto g = grammar::parse_gbnf(grammar::testing_grammars::kJson);
  Engine e(*model_, *backend_, tok_.get(), options(1));
  auto tg = e.compile_grammar(g);
  const int64_t vocab = model_->config().vocab_size;
  const std::vector<uint8_t> decodable = decodable_token_mask(*tok_, vocab);
  for (const char* prompt : {"Hello", "{\"a\": 1"}) {
    Request r = request(prompt, 16, 0.0f, 1);
    r.grammar = tg;
    const Result got = collect(*e.submit(r));
    ASSERT_EQ(got.error, "");
    std::vector<int32_t> ids = r.prompt;
    for (size_t step = 0; step < got.tokens.size(); ++step) {
      const auto logits = test::prompt_logits(*model_, *backend_, ids, test::f32_plan(256));
      const std::vector<float>& row = logits.back();
      const std::string text = text_of({got.tokens.begin(), got.tokens.begin() + static_cast<std::ptrdiff_t>(step)});
      int32_t best = -1;
      for (int32_t id = 0; id < vocab; ++id) {
        bool ok;
        if (id == tok_->eos_id())
          ok = grammar::grammar_accepts(*g, text);
        else if (!decodable[static_cast<size_t>(id)] || tok_->is_special(id))
          ok = false;
        else
          ok = grammar::grammar_accepts_prefix(*g, text + text_of({id}));
        if (ok && (best < 0 || row[static_cast<size_t>(id)] > row[static_cast<size_t>(best)])) best = id;
      }
      ASSERT_EQ(got.tokens[step], best) << "step " << step << " after '" << text << "'";
      ids.push_back(got.tokens[step]);
    }
  }
}

// On a device, requests under a grammar come down as the row's best candidates, the step's mask
// applied to them on the host (the whole row only where the choice depends on ids past them):
// the tokens of the whole-row path (sample_candidates 0), greedy and sampled, with less
// downloaded for greedy ones. Likewise requests with logprobs.
TEST_F(EngineGrammarTest, GrammarAndLogprobsRequestsFromCandidatesMatchTheWholeRow) {
  ThreadPool pool(2);
  LoadOptions load;
  std::string why;
  auto dev_backend = test::make_named_backend("fake-device", pool, load, &why);
  ASSERT_TRUE(dev_backend) << why;
  auto* dev = dynamic_cast<test::FakeDeviceBackend*>(dev_backend.get());
  ASSERT_NE(dev, nullptr);
  auto model = load_model(dir_->str(), load);
  Engine e(*model, *dev_backend, tok_.get(), options(4));  // 256 candidates a row
  EngineOptions rows_opt = options(4);
  rows_opt.sample_candidates = 0;
  Engine rows(*model, *dev_backend, tok_.get(), rows_opt);
  auto g = grammar::parse_gbnf(grammar::testing_grammars::kJson);
  auto tg = e.compile_grammar(g), tg_rows = rows.compile_grammar(g);
  const size_t row_bytes = static_cast<size_t>(model->config().vocab_size) * sizeof(float);
  size_t tokens = 0, candidate_bytes = 0;
  for (const char* prompt : kPrompts) {
    Request r = request(prompt, 16, 0.0f, 1);
    r.grammar = tg_rows;
    const Result want = collect(*rows.submit(r));
    ASSERT_EQ(want.error, "");
    r.grammar = tg;
    const size_t before = dev->downloaded_bytes;
    const Result got = collect(*e.submit(r));
    candidate_bytes += dev->downloaded_bytes - before;
    tokens += got.tokens.size();
    EXPECT_EQ(got.tokens, want.tokens) << prompt;
  }
  // Random weights rarely rank a JSON token among a row's 256 best: 13 of these 40 tokens needed
  // their rows (a trained model's rows would need fewer).
  EXPECT_LT(candidate_bytes, tokens * row_bytes / 2);

  // Sampled requests under the grammar (random weights: flat rows, so most draws need their rows).
  for (size_t i = 0; i < std::size(kPrompts); ++i) {
    Request r = request(kPrompts[i], 16, 1.0f, 300 + i);
    r.sampling.top_p = i % 2 ? 0.95f : 1.0f;
    r.grammar = tg_rows;
    const Result want = collect(*rows.submit(r));
    ASSERT_EQ(want.error, "");
    r.grammar = tg;
    EXPECT_EQ(collect(*e.submit(r)).tokens, want.tokens) << kPrompts[i];
  }

  // Greedy requests with logprobs and top_logprobs (no grammar): candidates and the row's
  // logsumexp come down, never the row; the same tokens and logprobs.
  for (const char* prompt : kPrompts) {
    Request r = request(prompt, 8, 0.0f, 1);
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = 3;
    const Result want = collect(*rows.submit(r));
    const size_t before = dev->downloaded_bytes;
    const Result got = collect(*e.submit(r));
    EXPECT_LT(dev->downloaded_bytes - before, row_bytes) << prompt;
    EXPECT_EQ(got.tokens, want.tokens) << prompt;
    EXPECT_EQ(got.logprobs, want.logprobs) << prompt;
    ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
    for (size_t t = 0; t < want.top_logprobs.size(); ++t)
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(got.top_logprobs[t][k].token, want.top_logprobs[t][k].token);
        EXPECT_EQ(got.top_logprobs[t][k].logprob, want.top_logprobs[t][k].logprob);
      }
  }
}

// Random weights at temperature 1 wander: every output is still in the language (complete when
// it stopped, a prefix when it ran out of tokens), for three grammars, 16 requests at once.
TEST_F(EngineGrammarTest, SampledOutputsStayInTheLanguage) {
  for (const char* gbnf : {grammar::testing_grammars::kJson, grammar::testing_grammars::kArithmetic,
                           grammar::testing_grammars::kCLike}) {
    auto g = grammar::parse_gbnf(gbnf);
    Engine e(*model_, *backend_, tok_.get(), options(16));
    auto tg = e.compile_grammar(g);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 16; ++i) {
      Request r = request(kPrompts[i % std::size(kPrompts)], 48, 1.0f, 7 + i);
      r.grammar = tg;
      streams.push_back(e.submit(r));
    }
    int complete = 0;
    for (auto& s : streams) {
      const Result r = collect(*s);
      ASSERT_EQ(r.error, "");
      const std::string text = text_of(content(r));
      if (r.finish == FinishReason::kStop) {
        EXPECT_TRUE(grammar::grammar_accepts(*g, text)) << text;
        ++complete;
      } else {
        EXPECT_EQ(r.finish, FinishReason::kLength);
        EXPECT_TRUE(grammar::grammar_accepts_prefix(*g, text)) << text;
      }
    }
    (void)complete;
  }
}

TEST_F(EngineGrammarTest, SpeculativeDraftsKeepGreedyOutputsUnderAGrammar) {
  auto g = grammar::parse_gbnf(grammar::testing_grammars::kArithmetic);
  Engine plain(*model_, *backend_, tok_.get(), options(4));
  Engine spec(*model_, *backend_, tok_.get(), options(4, 4));
  auto tg_plain = plain.compile_grammar(g);
  auto tg_spec = spec.compile_grammar(g);
  for (const char* prompt : kPrompts) {
    Request r = request(std::string(prompt) + " (1+2)*(1+2)*(1+2)", 40, 0.0f, 3);
    r.grammar = tg_plain;
    const Result want = collect(*plain.submit(r));
    r.grammar = tg_spec;
    r.drafter = Drafter::kNgram;
    const Result got = collect(*spec.submit(r));
    EXPECT_EQ(got.tokens, want.tokens) << prompt;
  }
}

// Jump-forward: forced text (property names, punctuation) is drafted and verified; greedy output
// is the same as decoding it token by token, and the verification steps show it happened.
TEST_F(EngineGrammarTest, JumpForwardKeepsGreedyOutputs) {
  const char* gbnf = R"(root ::= "{\"name\": \"" [a-z ]{1,12} "\", \"answer\": " ("true" | "false") ", \"items\": [" [0-9]{1,3} ("," [0-9]{1,3}){0,3} "]}")";
  auto g = grammar::parse_gbnf(gbnf);
  Engine token_by_token(*model_, *backend_, tok_.get(), options(4));
  Engine jumping(*model_, *backend_, tok_.get(), options(4, 8));
  auto tg0 = token_by_token.compile_grammar(g);
  auto tg1 = jumping.compile_grammar(g);
  int64_t verify_steps = 0;
  for (const char* prompt : kPrompts) {
    Request r = request(prompt, 80, 0.0f, 1);
    r.grammar = tg0;
    const Result want = collect(*token_by_token.submit(r));
    r.grammar = tg1;
    const Result got = collect(*jumping.submit(r));
    EXPECT_EQ(got.tokens, want.tokens) << prompt;
    EXPECT_EQ(got.finish, FinishReason::kStop);
    EXPECT_TRUE(grammar::grammar_accepts(*g, text_of(content(got)))) << text_of(got.tokens);
    verify_steps += got.usage.verify_steps;
    // Sampled: still in the language.
    r.sampling.temperature = 1.0f;
    const Result sampled = collect(*jumping.submit(r));
    EXPECT_TRUE(grammar::grammar_accepts(*g, text_of(content(sampled)))) << text_of(sampled.tokens);
  }
  EXPECT_GT(verify_steps, 0);
  // Off per request: no verification steps.
  Request r = request("Hello", 80, 0.0f, 1);
  r.grammar = tg1;
  r.jump_forward = false;
  EXPECT_EQ(collect(*jumping.submit(r)).usage.verify_steps, 0);
}

TEST_F(EngineGrammarTest, StopsWhenTheTextIsCompleteAndNothingCanFollow) {
  Engine e(*model_, *backend_, tok_.get(), options(1));
  auto tg = e.compile_grammar(grammar::parse_gbnf("root ::= \"yes\" | \"no\""));
  for (bool ignore_eos : {false, true}) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      Request r = request("Answer:", 20, 1.0f, seed);
      r.ignore_eos = ignore_eos;
      r.grammar = tg;
      const Result got = collect(*e.submit(r));
      EXPECT_EQ(got.finish, FinishReason::kStop);
      // Nothing can follow "yes" or "no": the request ends there, without a step for the
      // end-of-sequence id.
      EXPECT_FALSE(tok_->is_special(got.tokens.back()));
      const std::string text = text_of(got.tokens);
      EXPECT_TRUE(text == "yes" || text == "no") << text;
    }
  }
  // A grammar from another engine is refused.
  Engine other(*model_, *backend_, tok_.get(), options(1));
  Request r = request("x", 4, 0.0f, 1);
  r.grammar = other.compile_grammar(grammar::parse_gbnf("root ::= \"a\""));
  EXPECT_THROW(e.submit(r), Error);
}

// lfm serve's cache of compiled grammars is bounded in bytes (issue 55, class 4), not only in
// count: grammars of ~2000 rules each, a cache of 3.5 of them keeps 3.
TEST_F(EngineGrammarTest, GrammarCacheIsBoundedInBytes) {
  Engine e(*model_, *backend_, tok_.get(), options(1));
  auto gbnf = [](int i) { return "root ::= \"k" + std::to_string(i) + "\" [a-z]{0,2000}\n"; };
  const size_t one = e.compile_grammar(grammar::parse_gbnf(gbnf(0)))->footprint();
  ASSERT_GT(one, 100000u);
  server::GrammarCache cache(32, one * 7 / 2);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(cache.get(gbnf(i), e, "grammar"));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_LE(cache.bytes(), one * 7 / 2);
  // Used grammars grow (their masks): the total is measured again on the next insertion.
  server::GrammarCache count_only(32, size_t{1} << 40);
  for (int i = 0; i < 40; ++i) count_only.get(gbnf(i % 34), e, "grammar");
  EXPECT_EQ(count_only.size(), 32u);
}

}  // namespace
}  // namespace lfm
