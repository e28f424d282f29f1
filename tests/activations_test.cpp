// Layer-by-layer parity with transformers' own intermediate tensors (activations.json of
// fixtures a and f: the first 6 tokens, float32, eager). Values there are rounded to 7
// significant digits, so the bar is 1e-4 absolute plus 1e-5 relative. This pins down the first
// op that goes wrong when a change breaks parity.
#include <gtest/gtest.h>

#include <map>

#include "core/thread_pool.h"
#include "model/forward.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

void flatten(const nlohmann::json& v, std::vector<double>& out) {
  if (v.is_array())
    for (const auto& e : v) flatten(e, out);
  else
    out.push_back(v.get<double>());
}

class ActivationsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ActivationsTest, EveryObservedTensorMatchesTransformers) {
  const auto acts = test::read_json(test::fixture_dir(GetParam()) + "/activations.json");
  auto model = load_model(test::fixture_dir(GetParam()));
  ThreadPool pool(2);
  auto backend = make_reference_backend(pool);
  std::map<std::string, std::vector<float>> seen;
  auto cache = make_state_cache(*model, test::f32_plan(16));
  Forward fwd(*model, *backend, *cache);
  fwd.set_observer([&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
    seen[name].assign(data, data + rows * cols);
  });
  const auto ids = acts["input_ids"].get<std::vector<int32_t>>();
  StepOutput out;
  BatchItem item{cache->open(16), ids, true};
  fwd.step(std::span<const BatchItem>(&item, 1), out);

  int compared = 0;
  for (const auto& e : acts["entries"]) {
    const std::string name = e["name"].get<std::string>();
    auto it = seen.find(name);
    if (it == seen.end()) continue;
    std::vector<double> want;
    flatten(e["values"], want);
    ASSERT_EQ(want.size(), it->second.size()) << name;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(it->second[i], want[i], 1e-4 + 1e-5 * std::abs(want[i])) << name << " element " << i;
    ++compared;
  }
  // Every layer contributes its input, norms, mixer, FFN and output at least.
  EXPECT_GE(compared, 7 * model->config().n_layers) << "too few tensors compared";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ActivationsTest,
                         ::testing::Values("lfm2_a_fullattnidxs_tied_f32", "lfm2moe_f_tied_expertbias_f32"));

}  // namespace
}  // namespace lfm
