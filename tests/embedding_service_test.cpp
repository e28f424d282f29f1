// The embedding service (engine/embedding_service.h): calls from many threads give what the
// embedder gives each text alone, limits are refused before any work, cancelled calls end, and
// its counters come back to rest.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/embedding_service.h"
#include "engine/engine.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu_backend.h"
#include "retrieval_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

class EmbeddingServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = load_model(test::retrieval_fixture("lfm25_colbert_tiny_f32"));
    embedder_ = std::make_unique<Embedder>(*model_, nullptr, *be_);
    const auto ref = test::read_json(test::retrieval_fixture("lfm25_colbert_tiny_f32") + "/reference.json");
    for (const auto& t : ref["texts"])
      texts_.push_back(embedder_->prepare_ids(t["ids"].get<std::vector<int32_t>>(),
                                              parse_input_role(t["role"].get<std::string>())));
  }
  ThreadPool pool_{2};
  std::unique_ptr<Backend> be_ = make_backend_for(parse_isa("generic"), pool_);
  std::unique_ptr<Model> model_;
  std::unique_ptr<Embedder> embedder_;
  std::vector<PreparedText> texts_;
};

TEST_F(EmbeddingServiceTest, ConcurrentCallsGiveEachTextsOwnResult) {
  std::vector<std::vector<float>> alone;
  for (const PreparedText& t : texts_) alone.push_back(embedder_->embed(std::span<const PreparedText>(&t, 1))[0].values);
  EmbeddingServiceOptions opt;
  opt.batch_tokens = 30;  // passes of a few texts, mixing calls
  EmbeddingService service(*embedder_, opt);
  std::vector<std::future<std::string>> jobs;
  for (int t = 0; t < 6; ++t)
    jobs.push_back(std::async(std::launch::async, [&, t]() -> std::string {
      for (int k = 0; k < 5; ++k) {
        std::vector<PreparedText> mine;
        std::vector<size_t> which;
        for (size_t i = 0; i < texts_.size(); ++i)
          if ((i + static_cast<size_t>(t + k)) % 3 != 0) {
            mine.push_back(texts_[i]);
            which.push_back(i);
          }
        const auto out = service.submit(mine)->wait();
        if (out.size() != which.size()) return "wrong count";
        for (size_t i = 0; i < out.size(); ++i)
          if (out[i].values != alone[which[i]]) return "text " + std::to_string(which[i]) + " differs";
      }
      return "";
    }));
  for (auto& j : jobs) EXPECT_EQ(j.get(), "");
  const EmbeddingServiceStats s = service.stats();
  EXPECT_EQ(s.calls_total, 30);
  EXPECT_EQ(s.calls_waiting, 0);
  EXPECT_EQ(s.calls_running, 0);
  EXPECT_EQ(s.tokens_queued, 0);
  EXPECT_GT(s.passes_total, 0);
}

TEST_F(EmbeddingServiceTest, LimitsAreRefusedBeforeAnyWork) {
  EmbeddingServiceOptions opt;
  opt.max_texts_per_call = 3;
  opt.max_tokens_per_call = 40;
  opt.max_queued_tokens = 30;
  EmbeddingService service(*embedder_, opt);
  std::vector<PreparedText> four(texts_.begin(), texts_.begin() + 4);
  EXPECT_THROW(service.submit(four), Error);
  EXPECT_THROW(service.submit({}), Error);
  std::vector<PreparedText> many_tokens = {texts_[0], texts_[1], texts_[2]};  // 3 queries of 12 tokens
  EXPECT_THROW(service.submit(many_tokens), EngineBusy);  // 36 tokens > 30 queued at most
  PreparedText empty;
  EXPECT_THROW(service.submit({empty}), Error);
  EXPECT_EQ(service.stats().calls_total, 0);
  EXPECT_EQ(service.stats().tokens_queued, 0);
  // A call within the limits still runs.
  EXPECT_EQ(service.submit({texts_[0]})->wait().size(), 1u);
  // Per-token vectors add up: 12 tokens x 16 floats is past a bound of 100 floats.
  EmbeddingServiceOptions small;
  small.max_result_floats = 100;
  EmbeddingService tight(*embedder_, small);
  try {
    tight.submit({texts_[0]});
    ADD_FAILURE() << "192 floats fit a bound of 100";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("192 floats"), std::string::npos) << e.what();
  }
}

TEST_F(EmbeddingServiceTest, CancelledCallsEndAndTheCountersComeBack) {
  EmbeddingServiceOptions opt;
  opt.batch_tokens = 12;  // one query per pass: a long call is still queued when cancelled
  EmbeddingService service(*embedder_, opt);
  std::vector<PreparedText> lots;
  for (int r = 0; r < 20; ++r) lots.insert(lots.end(), texts_.begin(), texts_.end());
  auto call = service.submit(lots);
  call->cancel();
  try {
    const auto out = call->wait();
    EXPECT_EQ(out.size(), lots.size());  // it may have finished first
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos) << e.what();
  }
  EXPECT_EQ(service.submit({texts_[1]})->wait().size(), 1u);  // the service goes on
  const EmbeddingServiceStats s = service.stats();
  EXPECT_EQ(s.calls_waiting, 0);
  EXPECT_EQ(s.calls_running, 0);
  EXPECT_EQ(s.tokens_queued, 0);
}

}  // namespace
}  // namespace lfm
