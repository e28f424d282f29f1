// The precision policy of README "Precision", measured: on the BF16 fixture, lfm's default (exact
// float32 activations) and --bf16-activations, each with float32 state and with the checkpoint's
// default state (--kv-type auto: bf16 for this checkpoint), against BOTH of transformers' runs of
// it: float32 (reference.json) and bfloat16 (reference_bf16_run.json, tools/precision_reference),
// on every ISA path this CPU has. Prints max|dlogit|, argmax agreement per position (16 positions
// of full_forward.input_ids) and how many greedy tokens of each of the 3 recorded runs (32 each)
// agree before the first difference.
//   ./build/tests/lfm_tests --gtest_filter='PrecisionPolicy.*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kernels/cpu_backend.h"
#include "model/model.h"
#include "model/state_plan.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

constexpr double kLogitTol = 1e-4;      // float32 engines (fixture_test.cpp)
constexpr double kBf16Unit = 1.0 / 256; // u = 2^-8, bf16's unit roundoff

using Rows = std::vector<std::vector<double>>;

struct Against {
  double max_diff = 0;
  int argmax_equal = 0;
};

Against compare(const std::vector<std::vector<float>>& got, const Rows& want) {
  Against a;
  for (size_t t = 0; t < got.size(); ++t) {
    a.max_diff = std::max(a.max_diff, test::max_abs_diff(got[t], want[t]));
    const auto best = std::max_element(want[t].begin(), want[t].end()) - want[t].begin();
    a.argmax_equal += argmax(got[t].data(), static_cast<int64_t>(got[t].size())) == best;
  }
  return a;
}

// Tokens equal before the first difference.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

double max_abs(const Rows& rows) {
  double m = 0;
  for (const auto& r : rows)
    for (double v : r) m = std::max(m, std::abs(v));
  return m;
}

TEST(PrecisionPolicy, BothModesAgainstTransformersFloat32AndBfloat16Runs) {
  const std::string fixture = "lfm2_d_fullattnidxs_tied_bf16";
  const auto ref32 = test::reference(fixture);
  const auto ref16 = test::read_json(test::fixture_dir(fixture) + "/reference_bf16_run.json");
  ASSERT_EQ(ref16["meta"]["compute_dtype"], "bfloat16");
  const auto ids = ref32["full_forward"]["input_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ref16["full_forward"]["input_ids"].get<std::vector<int32_t>>(), ids);
  const auto hf32 = ref32["full_forward"]["logits"].get<Rows>();
  const auto hf16 = ref16["full_forward"]["logits"].get<Rows>();
  const double scale = max_abs(hf32);
  // transformers' own bf16 run against its float32 run: what "bf16 arithmetic" costs there.
  double hf_gap = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    hf_gap = std::max(hf_gap, test::max_abs_diff(std::span<const double>(hf16[t]), std::span<const double>(hf32[t])));
  std::printf("[ precision ] transformers bf16 run vs its float32 run: max|dlogit| %.3g (max|logit| %.3g)\n", hf_gap,
              scale);

  const auto& runs32 = ref32["greedy"]["runs"];
  const auto& runs16 = ref16["greedy"]["runs"];
  ASSERT_EQ(runs32.size(), runs16.size());

  auto exact = load_model(test::fixture_dir(fixture));
  auto rounded = load_model(test::fixture_dir(fixture), LoadOptions{.bf16_activations = true});
  ASSERT_FALSE(exact->bf16_activations());
  ASSERT_TRUE(rounded->bf16_activations());
  ASSERT_EQ(default_state_type(*exact), DType::BF16) << "--kv-type auto keeps a bf16 checkpoint's dtype";
  // Which kernel the AVX-512 path multiplies BF16 matrices with on this CPU: column pairs are AMX
  // (float32 activations as three bf16 terms, or one when rounded) or VDPBF16PS (rounded only).
  const auto pairs = [](const Model& m) {
    return m.weights().layers[0].ffn.w1.packed_layout == PackedLayout::kPairs16 ? "column pairs" : "float kernels";
  };
  std::printf("[ precision ] avx512 BF16 matrices: default %s, bf16 activations %s\n", pairs(*exact), pairs(*rounded));

  // Bounds (u = 2^-8, S = max|logit| of the float32 run = 16.1):
  //  - exact activations, f32 state vs float32 run: kLogitTol (float32 summation order only);
  //  - anything that rounds to bf16 (activations or state) vs float32 run: 8u·S, as StateTypeTest
  //    and Bf16Activations.StayWithinTheirBoundOnEveryPath;
  //  - every mode vs the bfloat16 run: 16u·S = 1.01. That run itself sits 7.4u·S (0.465) from the
  //    float32 one, and lfm's four combinations measured 0.400 to 0.624 from it on every path
  //    (2026-12-07, a CPU with AMX and AVX-512 BF16): a 1.6x margin over the largest. lfm does not
  //    imitate transformers' bf16 arithmetic (its residual stream, norms and matmul outputs stay
  //    float32), so rounding more in lfm does not bring it closer to that run.
  ThreadPool pool(2);
  int paths = 0;
  for (const std::string& isa : test::all_isas()) {
    if (!isa_supported(parse_isa(isa))) continue;
    ++paths;
    auto be = make_backend_for(parse_isa(isa), pool);
    for (const bool bf16_acts : {false, true}) {
      const Model& model = bf16_acts ? *rounded : *exact;
      for (const bool auto_state : {false, true}) {
        StatePlanOptions plan = test::f32_plan(64);
        if (auto_state) plan.type.reset();  // the checkpoint's default: bf16 here
        const auto got = test::prompt_logits(model, *be, ids, plan);
        const Against a32 = compare(got, hf32), a16 = compare(got, hf16);
        std::string g32, g16;
        for (size_t r = 0; r < runs32.size(); ++r) {
          const auto prompt = runs32[r]["prompt"].get<std::vector<int32_t>>();
          const auto want32 = runs32[r]["new_tokens"].get<std::vector<int32_t>>();
          const auto want16 = runs16[r]["new_tokens"].get<std::vector<int32_t>>();
          const auto toks = test::greedy(model, *be, prompt, static_cast<int64_t>(want32.size()), nullptr, plan);
          const std::string sep = r ? "," : "";
          g32 += sep + std::to_string(common_prefix(toks, want32));
          g16 += sep + std::to_string(common_prefix(toks, want16));
          if (!bf16_acts && !auto_state) {  // every recorded step wins by >= 5e-3: exact tokens are a fair bar
            EXPECT_EQ(toks, want32) << isa << " run " << r;
          }
        }
        const char* mode = bf16_acts ? "bf16-acts" : "default";
        const char* state = auto_state ? "bf16" : "f32";
        std::printf(
            "[ precision %-7s %-9s %-4s state ] vs HF f32: max|dlogit| %.3g, argmax %d/%zu, greedy %s/32 | "
            "vs HF bf16: max|dlogit| %.3g, argmax %d/%zu, greedy %s/32\n",
            isa.c_str(), mode, state, a32.max_diff, a32.argmax_equal, ids.size(), g32.c_str(), a16.max_diff,
            a16.argmax_equal, ids.size(), g16.c_str());
        const bool exact_path = !bf16_acts && !auto_state;
        EXPECT_LE(a32.max_diff, exact_path ? kLogitTol : 8 * kBf16Unit * scale) << isa << ' ' << mode << ' ' << state;
        if (!exact_path) {
          EXPECT_GT(a32.max_diff, 10 * kLogitTol) << isa << ' ' << mode << ' ' << state << ": nothing rounded?";
        }
        EXPECT_EQ(a32.argmax_equal, static_cast<int>(ids.size())) << isa << ' ' << mode << ' ' << state;
        EXPECT_LE(a16.max_diff, 16 * kBf16Unit * scale) << isa << ' ' << mode << ' ' << state;
      }
    }
  }
  EXPECT_GE(paths, 1);
}

}  // namespace
}  // namespace lfm
