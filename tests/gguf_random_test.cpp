// lfm gen-random: deterministic bytes from a seed, loadable in both formats (and the two formats
// agree), and `lfm info` reports real family shapes from a config-only folder without writing
// any weights.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/thread_pool.h"
#include "convert/random_checkpoint.h"
#include "model/forward.h"
#include "model/model.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

class GgufRandom : public ::testing::Test {
 protected:

  std::vector<float> logits(const Model& m, const std::vector<int32_t>& ids) {
    ThreadPool pool(2);
    auto be = make_reference_backend(pool);
    std::vector<float> flat;
    for (const auto& row : test::prompt_logits(m, *be, ids, test::f32_plan(32))) flat.insert(flat.end(), row.begin(), row.end());
    return flat;
  }
  test::TempDir dir_{"lfm_gguf_rand"};
};

TEST_F(GgufRandom, SameSeedSameBytesOtherSeedOtherBytes) {
  gguf::RandomCheckpointOptions opt;
  opt.shape = "tiny";
  opt.seed = 7;
  opt.threads = 1;
  gguf::write_random_hf((dir_ / "a").string(), opt);
  opt.threads = 2;  // bytes must not depend on the thread count
  gguf::write_random_hf((dir_ / "b").string(), opt);
  opt.seed = 8;
  gguf::write_random_hf((dir_ / "c").string(), opt);
  EXPECT_EQ(test::read_file(dir_ / "a/config.json"), test::read_file(dir_ / "b/config.json"));
  EXPECT_EQ(test::read_file(dir_ / "a/model.safetensors"), test::read_file(dir_ / "b/model.safetensors"));
  EXPECT_NE(test::read_file(dir_ / "a/model.safetensors"), test::read_file(dir_ / "c/model.safetensors"));

  opt.seed = 7;
  opt.gguf_type = gguf::FileType::Q4_K_M;
  opt.threads = 1;
  gguf::write_random_gguf((dir_ / "a.gguf").string(), opt);
  opt.threads = 2;
  gguf::write_random_gguf((dir_ / "b.gguf").string(), opt);
  EXPECT_EQ(test::read_file(dir_ / "a.gguf"), test::read_file(dir_ / "b.gguf"));
  for (const auto& e : fs::directory_iterator(dir_.path()))  // no temporary file is left behind
    EXPECT_EQ(e.path().filename().string().find(".lfm-tmp-"), std::string::npos) << e.path();
}

TEST_F(GgufRandom, BothFormatsLoadAndAgree) {
  for (const char* shape : {"tiny", "tiny-moe"}) {
    gguf::RandomCheckpointOptions opt;
    opt.shape = shape;
    opt.seed = 3;
    opt.hf_dtype = DType::F32;
    opt.gguf_type = gguf::FileType::F32;
    const std::string hf = (dir_ / (std::string(shape) + "_hf")).string();
    const std::string gg = (dir_ / (std::string(shape) + ".gguf")).string();
    gguf::write_random_hf(hf, opt);
    gguf::write_random_gguf(gg, opt);
    auto a = load_model(hf);
    auto b = load_model(gg);
    EXPECT_EQ(a->config().layer_pattern(), "cAcA");
    EXPECT_EQ(a->config().is_moe(), std::string(shape) == "tiny-moe");
    EXPECT_EQ(b->config().n_experts, a->config().n_experts);
    const std::vector<int32_t> ids = {1, 100, 200, 300, 400, 5};
    const auto la = logits(*a, ids), lb = logits(*b, ids);
    ASSERT_EQ(la.size(), lb.size());
    double worst = 0;
    for (size_t i = 0; i < la.size(); ++i) {
      ASSERT_TRUE(std::isfinite(la[i]));
      worst = std::max(worst, static_cast<double>(std::abs(la[i] - lb[i])));
    }
    EXPECT_LE(worst, 1e-6) << shape;
  }
}

// layer_types cuts a shape's layer stack (the CUDA emulator's cost model runs 1.2B widths with
// two or three layers): the widths stay the shape's, the stack is the letters given.
TEST_F(GgufRandom, LayerTypesReplaceTheStack) {
  gguf::RandomCheckpointOptions opt;
  opt.shape = "tiny";
  opt.layer_types = "Acc";
  opt.gguf_type = gguf::FileType::F32;
  const std::string gg = (dir_ / "acc.gguf").string();
  gguf::write_random_gguf(gg, opt);
  auto m = load_model(gg);
  EXPECT_EQ(m->config().layer_pattern(), "Acc");
  EXPECT_EQ(m->config().n_layers, 3);
  EXPECT_EQ(m->config().hidden_size, 256);
  opt.layer_types = "cx";
  EXPECT_THROW(gguf::write_random_gguf((dir_ / "bad.gguf").string(), opt), std::exception);
}

TEST_F(GgufRandom, CliWritesLoadableCheckpoints) {
  const std::string out = (dir_ / "t.gguf").string();
  auto [rc1, o1] = test::run_lfm("gen-random --shape tiny --seed 1 --type q8_0 -q -o " + out, test::Stderr::kDiscard);
  ASSERT_EQ(rc1, 0);
  auto [rc2, info] = test::run_lfm("info -m " + out, test::Stderr::kDiscard);
  ASSERT_EQ(rc2, 0);
  EXPECT_NE(info.find("file type Q8_0"), std::string::npos) << info;
  EXPECT_NE(info.find("Q8_0: 25 tensors"), std::string::npos) << info;
  EXPECT_NE(info.find("general.description"), std::string::npos) << info;
  auto [rc3, help] = test::run_lfm("gen-random --help", test::Stderr::kDiscard);
  EXPECT_NE(help.find("BENCHMARKING ONLY"), std::string::npos) << help;
}

// Parameter counts re-derived in LFM2_SPEC.md §2 / §6 from checkpoint headers.
TEST_F(GgufRandom, InfoReportsRealShapesFromConfigOnly) {
  struct Case {
    const char* shape;
    int64_t params;
    const char* pattern;
    int64_t ffn;
  };
  for (const Case c : {Case{"350M", 354483968, "ccAccAccAcAcAcAc", 4608},
                       Case{"1.2B", 1170340608, "ccAccAccAcAcAcAc", 8192},
                       Case{"2.6B", 2569272320, "ccAccAcccAcccAcccAcccAccAccAcc", 10752},
                       Case{"8B-A1B", 8339929856 + 704, "ccAcccAcccAcccAcccAccAcc", 7168}}) {
    const std::string d = (dir_ / c.shape).string();
    ASSERT_EQ(test::run_lfm(std::string("gen-random --config-only --shape ") + c.shape + " -o " + d, test::Stderr::kDiscard).code, 0);
    EXPECT_FALSE(fs::exists(fs::path(d) / "model.safetensors"));
    auto [rc, out] = test::run_lfm("info --json -m " + d, test::Stderr::kDiscard);
    ASSERT_EQ(rc, 0) << out;
    const auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["parameters"].get<int64_t>(), c.params) << c.shape;
    EXPECT_EQ(j["layer_pattern"].get<std::string>(), c.pattern) << c.shape;
    EXPECT_EQ(j["config"]["ffn_dim"].get<int64_t>(), c.ffn) << c.shape;
  }
}

}  // namespace
}  // namespace lfm
