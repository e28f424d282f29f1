// `lfm logits/generate --image` and `lfm convert` on an LFM2-VL checkpoint, end to end: the image
// token stands once per image in --ids / --prompt-ids and is laid out as transformers' processor
// does; the expanded ids, the logits (1e-4) and greedy tokens match the transformers fixture, also
// through the converted GGUF pair (--mmproj); bad images fail with a message and exit status 1.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "test_util.h"

namespace lfm {
namespace {

const std::string kVl = test::data_dir() + "/hf_vl/lfm2vl_a_tied_ln";
const std::string kImage = test::data_dir() + "/hf_vl/images/rgb_37x53.png";

test::RunResult run(const std::string& args) { return test::run_lfm(args, test::Stderr::kDiscard); }

// The case's ids with each image's layout (<|image_start|> … <|image_end|>) folded back into one
// image token: what a user passes.
std::string folded_ids(const nlohmann::json& ids) {
  std::string out;
  bool inside = false;
  for (const auto& v : ids) {
    const int id = v.get<int>();
    if (id == 498) {
      inside = true;
      out += (out.empty() ? "" : ",") + std::string("396");
    }
    if (!inside) out += (out.empty() ? "" : ",") + std::to_string(id);
    if (id == 499) inside = false;
  }
  return out;
}

const nlohmann::json& one_image_case() {
  static const nlohmann::json ref = test::read_json(kVl + "/reference.json");
  for (const auto& c : ref["cases"])
    if (c["name"] == "one_image") return c;
  throw std::runtime_error("no one_image case");
}

TEST(VisionCliTest, LogitsWithAnImageMatchTransformers) {
  const auto& c = one_image_case();
  const auto r = run("logits -m " + kVl + " --ids " + folded_ids(c["input_ids"]) + " --image " + kImage + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"], c["input_ids"]);
  // The reference logits are in reference.safetensors; the argmax per position is in the JSON.
  std::vector<int> argmax;
  for (const auto& row : j["logits"]) {
    const auto v = row.get<std::vector<float>>();
    argmax.push_back(static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()));
  }
  EXPECT_EQ(nlohmann::json(argmax), c["argmax"]);
}

TEST(VisionCliTest, GenerateWithAnImageAndThroughTheConvertedGgufPair) {
  const auto& c = one_image_case();
  const std::string ids = folded_ids(c["input_ids"]);
  const auto r = run("generate -m " + kVl + " --prompt-ids " + ids + " --image " + kImage + " -n 12 --ignore-eos --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], c["input_ids"]);
  EXPECT_EQ(j["generated_ids"], c["greedy_ids"]);

  const test::TempDir dir("vl_cli");
  const std::string text = (dir / "vl.gguf").string();
  const auto conv = run("convert -m " + kVl + " -o " + text + " --type f32 -q");
  ASSERT_EQ(conv.code, 0) << conv.out;
  const std::string mmproj = (dir / "mmproj-vl.gguf").string();
  ASSERT_TRUE(std::filesystem::exists(mmproj));
  // The processor config beside the pair sets the tiny model's preprocessing.
  std::filesystem::copy_file(kVl + "/processor_config.json", dir / "processor_config.json");
  const auto g = run("generate -m " + text + " --mmproj " + mmproj + " --prompt-ids " + ids + " --image " + kImage +
                     " -n 12 --ignore-eos --json");
  ASSERT_EQ(g.code, 0) << g.out;
  EXPECT_EQ(nlohmann::json::parse(g.out)["generated_ids"], c["greedy_ids"]);
}

TEST(VisionCliTest, BadImagesAndMismatchedPlaceholdersAreRefused) {
  const test::TempDir dir("vl_bad");
  const std::string junk = dir.write("junk.png", "\x89PNG\r\n\x1a\n not really");
  auto r = test::run_lfm("generate -m " + kVl + " --prompt-ids 1,396,7 --image " + junk + " -n 2", test::Stderr::kMerge);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("junk.png"), std::string::npos) << r.out;
  r = test::run_lfm("generate -m " + kVl + " --prompt-ids 1,7 --image " + kImage + " -n 2", test::Stderr::kMerge);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("image placeholders"), std::string::npos) << r.out;
  r = test::run_lfm("generate -m " + test::fixture_dir("lfm2_a_fullattnidxs_tied_f32") + " --prompt-ids 1,7 --image " +
                        kImage + " -n 2",
                    test::Stderr::kMerge);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("vision tower"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lfm
