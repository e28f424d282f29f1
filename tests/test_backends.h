// The backends a parameterised test runs on, by name: "cpu" (the CPU backend this machine
// selects), "fake-device" (tests/fake_device_backend.h: memory the host cannot read),
// "fake-device-replay" (the same, its ops queued and replayed as recorded graphs, as CUDA graphs
// do) and, in a CUDA build, "cuda" (skipped without a GPU) and "cuda-emu" (the CUDA backend's
// sources on the CPU emulator of the CUDA runtime, tests/cuda_emu/: runs everywhere).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/cpu_backend.h"
#include "model/model.h"
#include "fake_device_backend.h"
#if LFM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif
#if LFM_HAVE_CUDA_EMU
#include "cuda_emu/cuda_emu_backend.h"
#endif

namespace lfm::test {

// The CUDA emulator runs a kernel one CUDA thread at a time, so an engine test takes 10-300 s on
// it. By default it runs the (test, fixture) pairs below, chosen for the device code they reach
// that tests/cuda does not: the prefix cache's conv checkpoints, candidates, logprobs and MoE
// routing in the engine's own steps, the vision and speech encoders, the retrievers' encoder, speculative
// rollback of device state. LFM_CUDA_EMU_ALL=1 runs every test there
// (scripts/device_check.sh runs them all on a GPU).
inline bool emulator_selected(std::string* why) {
  if (const char* all = std::getenv("LFM_CUDA_EMU_ALL"); all && std::strcmp(all, "1") == 0) return true;
  static const std::pair<const char*, const char*> kSelected[] = {
      {"EngineTest.PrefixCacheResumesASecondTurnWithUnchangedOutputs", "lfm2_c_layertypes_untied_convbias_f32"},
      {"EngineTest.SampledRequestsFromCandidatesMatchTheWholeRowSampler", "lfm2_c_layertypes_untied_convbias_f32"},
      {"EngineTest.LogprobsFromCandidatesAreTheWholeRowsLogprobs", "lfm2moe_g_untied_nobias_scaled_f32"},
      {"VisionModelTest.TowerAndProjectorMatchTransformersPerTile", ""},
      {"VisionModelTest.LogitsMatchTransformersWithImageEmbeddings", ""},
      {"VisionModelTest.PositionEmbeddingsResizeAsTransformers", ""},
      {"VisionModelTest.TheGgufPairGivesTheSameLogits", ""},
      {"VisionModelTest.ImageRequestsAreCheckedAtSubmit", ""},
      {"VisionModelTest.EngineGreedyMatchesAloneBatchedAndFromThePrefixCache", "lfm2vl_b_untied_noln"},
      {"RetrievalFixtureTest.HiddenStatesMatchTransformers", ""},
      {"RetrievalFixtureTest.VectorsAndScoresMatchTheReference", ""},
      {"RetrievalFixtureTest.TextsAloneAndBatchedAreTheSameBits", ""},
      {"AudioEncoderFixtureTest.EncoderAndAdapterMatchTransformersPerClip", "lfm2audio_tiny_a"},
      {"AudioEncoderFixtureTest.PromptLogitsAndGreedyTokensMatchTransformers", "lfm2audio_tiny_b"},
      {"AudioEncoderFixtureTest.ClipsTogetherAndStagedAreTheClipsAlone", "lfm2audio_tiny_a"},
      {"SpeechOutTest.DepthTransformerMatchesTransformers", ""},
      {"SpeechOutTest.ASpokenTurnInThePromptMatchesTransformers", ""},
      {"SpeculativeStateTest.KeepingAnyPrefixIsExactlyFeedingOnlyThatPrefix",
       "(\"lfm2_c_layertypes_untied_convbias_f32\", \"cuda-emu\", 1, \"f32\")"},
      {"SlidingAttentionTest.PagedAttentionMatchesPlainLoops", ""},
      {"SlidingAttentionTest.LongCausalPrefillsMatchPlainLoops", ""},
      {"DetokenizerTest.WaveformAndStagesMatchTransformers", ""},
  };
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!info) return true;
  std::string suite = info->test_suite_name(), name = info->name();
  suite = suite.substr(suite.rfind('/') + 1);  // "Fixtures/EngineTest" → "EngineTest"
  const std::string test = suite + "." + name.substr(0, name.find('/'));
  const std::string param = info->value_param() ? info->value_param() : "";
  for (const auto& [t, fixture] : kSelected)
    if (test == t && param.find(fixture) != std::string::npos) return true;
  *why = "on the CUDA emulator this test runs with LFM_CUDA_EMU_ALL=1 (tests/test_backends.h)";
  return false;
}

// The named backend, and in `load` the backend that prepares a model's weights (none for the
// CPU: the shared CPU preparation). Null, with `why` set, where "cuda" cannot run here.
inline std::unique_ptr<Backend> make_named_backend(const std::string& name, ThreadPool& pool, LoadOptions& load,
                                                   std::string* why) {
  std::unique_ptr<Backend> be;
  if (name == "fake-device" || name == "fake-device-replay") {
    be = std::make_unique<FakeDeviceBackend>(pool, name == "fake-device-replay");
  } else if (name == "cuda") {
#if LFM_HAVE_CUDA
    if (!cuda_device_present(why)) return nullptr;
    be = make_cuda_backend(0, pool);
#else
    *why = "built without CUDA";
    return nullptr;
#endif
  } else if (name == "cuda-emu") {
#if LFM_HAVE_CUDA_EMU
    if (!emulator_selected(why)) return nullptr;
    be = make_cuda_emu_backend(0, pool);
#else
    *why = "built without the CUDA emulator";
    return nullptr;
#endif
  } else {
    return make_cpu_backend(pool);
  }
  load.backend = be.get();
  return be;
}

// A parameterised test's name from its (fixture, backend) parameters: the fixture's first
// `prefix` characters and the backend, e.g. "lfm2_c_l_fake_device" (filters such as '*cuda*').
template <typename Info>
std::string fixture_backend_name(const Info& info, size_t prefix = 8) {
  std::string b = std::get<1>(info.param);
  for (char& ch : b)
    if (ch == '-') ch = '_';
  return std::get<0>(info.param).substr(0, prefix) + "_" + b;
}

// fixture_backend_name plus the KV block size the third parameter gives: "lfm2_c_la_cuda_block16".
template <typename Info>
std::string fixture_backend_block_name(const Info& info) {
  return fixture_backend_name(info, 9) + "_block" + std::to_string(std::get<2>(info.param));
}

}  // namespace lfm::test
