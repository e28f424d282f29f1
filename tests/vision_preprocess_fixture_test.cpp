// The image pipeline against the transformers fixture's own records (tests/data/hf_vl, made by
// PIL 9.4 + transformers 5.2.0's Lfm2VlImageProcessorFast on torch 1.13): every test image decodes
// to PIL's pixels, preprocesses to the processor's tiles bit for bit (sha256 of the float32 pixel
// values, i.e. within 1e-6 and closer) at LFM2-VL's real config (a) and the tiny config (b), and
// prompts expand to the processor's token ids.
#include <gtest/gtest.h>

#include "engine/image_prompt.h"
#include "hub/digest.h"
#include "image/image.h"
#include "image/lfm2vl_preprocess.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm {
namespace {

using nlohmann::json;

std::string vl(const std::string& name) { return test::data_dir() + "/hf_vl/" + name; }

std::string bytes_of(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

TEST(VisionFixture, EveryImageDecodesToPilsPixels) {
  const json images = test::read_json(vl("images.json"));
  for (const json& d : images["decoded"]) {
    SCOPED_TRACE(d["file"].get<std::string>());
    const image::Image img = image::load_image_file(vl("images/" + d["file"].get<std::string>()));
    EXPECT_EQ(img.width, d["width"].get<int>());
    EXPECT_EQ(img.height, d["height"].get<int>());
    EXPECT_EQ(hub::sha256_hex(bytes_of(img.rgb.data(), img.rgb.size())), d["sha256_hwc_u8"].get<std::string>());
  }
}

class VisionPreprocessFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(VisionPreprocessFixture, TilesEqualTheProcessorsPixelValues) {
  const json rec = test::read_json(vl("preprocess_" + GetParam() + ".json"));
  const image::ProcessorConfig cfg = image::ProcessorConfig::from_json(rec["config"]);
  int checked = 0;
  for (const json& r : rec["images"]) {
    if (r.value("model_would_fail", false)) continue;  // transformers itself fails on it
    SCOPED_TRACE(r["file"].get<std::string>());
    const image::PreprocessedImage p = image::preprocess(image::load_image_file(vl("images/" + r["file"].get<std::string>())), cfg);
    EXPECT_EQ(p.rows, r["rows"].get<int>());
    EXPECT_EQ(p.cols, r["cols"].get<int>());
    EXPECT_EQ(p.thumbnail, r["thumbnail"].get<bool>());
    ASSERT_EQ(p.tiles.size(), r["tiles"].size());
    for (size_t t = 0; t < p.tiles.size(); ++t) {
      const json& want = r["tiles"][t];
      EXPECT_EQ(p.tiles[t].patches_h, want["spatial_shape"][0].get<int>()) << "tile " << t;
      EXPECT_EQ(p.tiles[t].patches_w, want["spatial_shape"][1].get<int>()) << "tile " << t;
      EXPECT_EQ(p.tiles[t].tokens(cfg.downsample_factor), want["tokens"].get<int>()) << "tile " << t;
      EXPECT_EQ(hub::sha256_hex(bytes_of(p.tiles[t].patches.data(), p.tiles[t].patches.size() * sizeof(float))),
                want["sha256_pixel_values_f32le"].get<std::string>())
          << "tile " << t;
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
}

TEST_P(VisionPreprocessFixture, PromptsExpandToTheProcessorsTokenIds) {
  const json layout = test::read_json(vl("token_layout.json"))["configs"][GetParam()];
  const json rec = test::read_json(vl("preprocess_" + GetParam() + ".json"));
  const auto tok = load_tokenizer(vl("lfm2vl_a_tied_ln"));
  ImagePromptSetup setup;
  setup.processor = image::ProcessorConfig::from_json(rec["config"]);
  setup.markers = image::resolve_image_markers([&](std::string_view n) { return tok->token_to_id(n); });
  setup.image_token_id = 396;
  int checked = 0;
  for (const json& p : layout["prompts"]) {
    if (!p["use_image_special_tokens"].get<bool>()) continue;
    SCOPED_TRACE(p["name"].get<std::string>());
    std::vector<image::Image> images;
    for (const json& f : p["images"]) images.push_back(image::load_image_file(vl("images/" + f.get<std::string>())));
    const ImagePrompt out = expand_images(tok->encode(p["text"].get<std::string>(), false), images, setup);
    const json want = p["input_ids"].is_string() ? json::parse(p["input_ids"].get<std::string>()) : p["input_ids"];
    EXPECT_EQ(json(out.ids), want);
    // Every image token belongs to exactly one tile, in order.
    int64_t image_tokens = 0;
    for (const auto& img : out.images)
      for (const auto& t : img->tiles) image_tokens += t.tokens;
    EXPECT_EQ(image_tokens, p["n_image_tokens"].get<int64_t>());
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

INSTANTIATE_TEST_SUITE_P(Configs, VisionPreprocessFixture, ::testing::Values("a", "b"));

}  // namespace
}  // namespace lfm
