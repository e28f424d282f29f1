// Backend::edit_logits and Backend::top_candidates on every CPU backend and on the fake device
// (queued and replayed), against the plain loops of sampling_ops_check.h.
#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "kernels/cpu_backend.h"
#include "fake_device_backend.h"
#include "sampling_ops_check.h"
#include "test_util.h"

namespace lfm {
namespace {

class SamplingOpsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SamplingOpsTest, EditsAndCandidatesMatchPlainLoops) {
  if (!isa_supported(parse_isa(GetParam()))) GTEST_SKIP() << "CPU lacks " << GetParam();
  ThreadPool pool(2);
  auto be = make_backend_for(parse_isa(GetParam()), pool);
  test::check_sampling_ops(*be);
}

INSTANTIATE_TEST_SUITE_P(Isa, SamplingOpsTest, ::testing::ValuesIn(test::all_isas()));

TEST(DeviceNeutralForward, SamplingOpsOnADevice) {
  ThreadPool pool(2);
  for (bool replay : {false, true}) {
    test::FakeDeviceBackend dev(pool, replay);
    test::check_sampling_ops(dev);
  }
}

}  // namespace
}  // namespace lfm
