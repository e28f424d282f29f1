// Structured output end to end (issue 38's validity criterion): for every schema of the suite in
// tests/data/grammar/schemas (65 schemas: nested objects, bounded arrays, enums, refs, anyOf,
// patterns, bounded numbers, formats), random-weight models sampling at temperature 1 under the
// schema's grammar produce outputs that python's jsonschema validates, every one, compact and
// with whitespace (two samples per schema, one in the sanitizer build); regexes likewise against
// std::regex. (GBNF grammars: engine_grammar_test.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include "std_regex.h"

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "model_test_util.h"
#include "schema_oracle.h"
#include "test_backends.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// Samples per schema: the sanitizer build (several times slower) checks memory with one, the
// release build the outputs with two.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kSamplesPerSchema = 1;
#else
constexpr int kSamplesPerSchema = 2;
#endif

class StructuredValidityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_text_model(dir_.str());
    LoadOptions load;
    std::string why;
    backend_ = test::make_named_backend("cpu", pool_, load, &why);
    ASSERT_TRUE(backend_) << why;
    model_ = load_model(dir_.str(), load);
    tok_ = load_tokenizer(dir_.str());
    EngineOptions o;
    o.state.ctx_size = 1024;
    o.state.parallel = 16;
    o.state.type = DType::F32;
    engine_ = std::make_unique<Engine>(*model_, *backend_, tok_.get(), o);
  }
  std::vector<std::shared_ptr<RequestStream>> submit(std::shared_ptr<const grammar::Grammar> g, int n, uint32_t seed) {
    auto tg = engine_->compile_grammar(std::move(g));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < n; ++i) {
      Request r;
      r.prompt = tok_->encode("Answer in JSON:", false);
      r.max_tokens = 300;
      r.sampling.temperature = 1.0f;
      r.sampling.seed = seed + static_cast<uint32_t>(i);
      r.grammar = tg;
      streams.push_back(engine_->submit(r));
    }
    return streams;
  }
  // Texts of the requests that ended with the grammar complete; `total` counts all.
  std::vector<std::string> complete_texts(const std::vector<std::shared_ptr<RequestStream>>& streams, int& total) {
    std::vector<std::string> done;
    for (auto& s : streams) {
      const test::Result res = test::collect(*s);
      EXPECT_EQ(res.error, "");
      ++total;
      if (res.finish != FinishReason::kStop) continue;
      std::vector<int32_t> ids = res.tokens;
      if (!ids.empty() && tok_->is_special(ids.back())) ids.pop_back();
      std::string text;
      for (int32_t id : ids) tok_->append_token_bytes(id, text);
      done.push_back(text);
    }
    return done;
  }

  test::TempDir dir_{"lfm_validity"};
  ThreadPool pool_{2};
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(StructuredValidityTest, EverySchemaOfTheSuiteGivesValidOutputs) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(std::string(LFM_SOURCE_DIR) + "/tests/data/grammar/schemas"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 50u);
  // Every schema's requests at once (the engine batches them), then every output checked.
  std::vector<ojson> schemas;
  std::vector<std::vector<std::shared_ptr<RequestStream>>> streams;
  for (size_t f = 0; f < files.size(); ++f) {
    std::ifstream in(files[f]);
    schemas.push_back(ojson::parse(in)["schema"]);
    grammar::JsonSchemaOptions opt;
    opt.any_whitespace = f % 2 == 1;
    streams.push_back(submit(grammar::parse_gbnf(grammar::json_schema_to_gbnf(schemas.back(), opt)), kSamplesPerSchema,
                             100 + static_cast<uint32_t>(f) * 7));
  }
  int total = 0, complete = 0;
  std::vector<std::pair<ojson, std::vector<std::string>>> outputs;  // pair index = file index
  for (size_t f = 0; f < files.size(); ++f) {
    outputs.push_back({schemas[f], complete_texts(streams[f], total)});
    complete += static_cast<int>(outputs.back().second.size());
  }
  EXPECT_EQ(test::invalid_texts(outputs), "") << "\"pair\" is the index of the schema file in sorted order";
  // Random weights wander (a string closes when its quote is drawn): most finish in 300 tokens.
  EXPECT_GE(complete * 2, total) << complete << " of " << total << " outputs complete";
  std::printf("[ structured ] %d of %d outputs complete, all valid\n", complete, total);
}

TEST_F(StructuredValidityTest, RegexOutputsMatch) {
  const char* patterns[] = {"[a-z]{3,8}@[a-z]{2,6}\\.(com|org)", "(yes|no|maybe)", "-?[0-9]{1,4}(\\.[0-9]{1,2})?",
                            "[A-Z][a-z]+( [A-Z][a-z]+){0,2}", "#[0-9a-f]{6}", "\\d{4}-\\d{2}-\\d{2}"};
  int total = 0;
  for (const char* p : patterns) {
    const auto texts = complete_texts(submit(grammar::parse_gbnf(grammar::regex_to_gbnf(p)), 4, 11), total);
    EXPECT_FALSE(texts.empty()) << p;
    for (const auto& t : texts) EXPECT_TRUE(std::regex_match(t, std::regex(p))) << p << " → " << t;
  }
}

}  // namespace
}  // namespace lfm
