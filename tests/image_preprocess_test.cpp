// LFM2-VL preprocessing and the prompt layout against transformers v5.2.0's
// Lfm2VlImageProcessorFast and Lfm2VlProcessor (tests/data/image/reference.json): grid, thumbnail,
// smart_resize size, per-tile patch grid and the sha256 of every tile's float32 pixel values
// (bit-exact; the uint8 levels behind them are stored for a readable diff on the small configs),
// the expanded prompt text; ProcessorConfig::from_json.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "image/lfm2vl_preprocess.h"
#include "image_test_util.h"

namespace lfm::image {
namespace {

ProcessorConfig config_named(const std::string& name) {
  return ProcessorConfig::from_json(test::image_reference()["configs"][name]);
}

// A fake vocabulary: each marker name gets an id; rendering the ids back gives the text.
struct FakeVocab {
  std::map<std::string, int32_t, std::less<>> ids;
  std::map<int32_t, std::string> names;
  FakeVocab() {
    auto add = [&](const std::string& s) {
      const int32_t id = int32_t(ids.size()) + 100;
      ids[s] = id;
      names[id] = s;
    };
    for (const char* s : {"<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"}) add(s);
    for (int r = 1; r <= 10; ++r)
      for (int c = 1; c <= 10; ++c) add(cat("<|img_row_", r, "_col_", c, "|>"));
  }
  ImageMarkerIds markers() const {
    return resolve_image_markers([&](std::string_view n) -> std::optional<int32_t> {
      const auto it = ids.find(n);
      return it == ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
    });
  }
  std::string render(const std::vector<int32_t>& v) const {
    std::string s;
    for (int32_t id : v) s += names.at(id);
    return s;
  }
};

class ImagePreprocessVsHF : public ::testing::TestWithParam<int> {};

TEST_P(ImagePreprocessVsHF, SameTilesPixelsAndLayout) {
  const auto& ref = test::image_reference()["preprocess"][GetParam()];
  const std::string file = ref["file"], cfg_name = ref["config"];
  SCOPED_TRACE(file + " / " + cfg_name);
  const ProcessorConfig cfg = config_named(cfg_name);
  const Image img = load_image_file(test::image_file(file));
  const PreprocessedImage out = preprocess(img, cfg);

  EXPECT_EQ(out.rows, ref["rows"].get<int>());
  EXPECT_EQ(out.cols, ref["cols"].get<int>());
  EXPECT_EQ(out.resized_height, ref["image_size"][0].get<int>());
  EXPECT_EQ(out.resized_width, ref["image_size"][1].get<int>());
  const auto& tiles = ref["tiles"];
  ASSERT_EQ(out.tiles.size(), tiles.size());
  EXPECT_EQ(out.thumbnail, out.rows * out.cols > 1 && cfg.use_thumbnail);
  const int p = cfg.encoder_patch_size;
  for (size_t t = 0; t < tiles.size(); ++t) {
    SCOPED_TRACE(testing::Message() << "tile " << t);
    const ImageTile& tile = out.tiles[t];
    ASSERT_EQ(tile.patches_h, tiles[t]["patches_h"].get<int>());
    ASSERT_EQ(tile.patches_w, tiles[t]["patches_w"].get<int>());
    ASSERT_EQ(tile.patches.size(), size_t(tile.patches_h) * tile.patches_w * p * p * 3);
    if (tiles[t].contains("levels_base64")) {  // a readable diff first
      const std::string levels = test::base64_decode(tiles[t]["levels_base64"]);
      ASSERT_EQ(levels.size(), tile.patches.size());
      double max_diff = 0;
      for (size_t i = 0; i < levels.size(); ++i) {
        const int ch = int(i % 3);
        const float v = tile.patches[i];
        const double level = cfg.do_normalize ? (double(v) * cfg.image_std[ch] + cfg.image_mean[ch]) / cfg.rescale_factor
                                              : double(v) / cfg.rescale_factor;
        max_diff = std::max(max_diff, std::abs(level - double(uint8_t(levels[i]))));
      }
      EXPECT_LT(max_diff, 0.01) << "uint8 levels differ from the processor's by up to " << max_diff;
    }
    EXPECT_EQ(test::sha256_of(tile.patches), tiles[t]["sha256"].get<std::string>()) << "float32 values differ";
  }

  const FakeVocab vocab;
  const std::vector<int32_t> layout = image_token_layout(out, vocab.markers(), cfg.downsample_factor);
  EXPECT_EQ(vocab.render(layout), ref["expanded_text"].get<std::string>());
  int image_tokens = 0, features = 0;
  for (int32_t id : layout) image_tokens += id == vocab.ids.at("<image>");
  for (const ImageTile& t : out.tiles) features += t.tokens(cfg.downsample_factor);
  EXPECT_EQ(image_tokens, features);
}

INSTANTIATE_TEST_SUITE_P(ImageReference, ImagePreprocessVsHF,
                         ::testing::Range(0, int(test::image_reference()["preprocess"].size())));

TEST(ImageConfig, DefaultsAreLfm2VlsAndJsonNestingIsRead) {
  const ProcessorConfig d;
  EXPECT_EQ(d.tile_size, 512);
  EXPECT_EQ(d.max_image_tokens, 256);
  const nlohmann::json flat = {{"tile_size", 64}, {"use_thumbnail", false}, {"image_mean", 0.25}, {"unknown", "x"}};
  const ProcessorConfig a = ProcessorConfig::from_json(flat);
  EXPECT_EQ(a.tile_size, 64);
  EXPECT_FALSE(a.use_thumbnail);
  EXPECT_EQ(a.image_mean[2], 0.25f);
  // processor_config.json (transformers v5): the "image_processor" object wins.
  const nlohmann::json nested = {{"processor_class", "Lfm2VlProcessor"},
                                 {"image_processor", {{"max_tiles", 4}, {"resample", 2}}}};
  EXPECT_EQ(ProcessorConfig::from_json(nested).max_tiles, 4);
}

TEST(ImageConfig, BadValuesNameTheKey) {
  auto expect_error = [](const nlohmann::json& j, const std::string& key) {
    try {
      ProcessorConfig::from_json(j);
      ADD_FAILURE() << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expect_error({{"tile_size", "512"}}, "'tile_size'");
  expect_error({{"tile_size", 500}}, "tile_size 500 is not a multiple");
  expect_error({{"downsample_factor", 0}}, "'downsample_factor'");
  expect_error({{"min_tiles", 5}, {"max_tiles", 2}}, "min_tiles 5 exceeds max_tiles 2");
  expect_error({{"use_thumbnail", 1}}, "'use_thumbnail'");
  expect_error({{"image_std", {0.5, 0.0, 0.5}}}, "'image_std'");
  expect_error({{"image_mean", {0.5, 0.5}}}, "'image_mean'");
  expect_error({{"resample", 3}}, "'resample'");
  expect_error({{"max_pixels_tolerance", -1}}, "'max_pixels_tolerance'");
  expect_error({{"rescale_factor", 0}}, "'rescale_factor'");
  expect_error({{"max_image_tokens", 1 << 20}, {"encoder_patch_size", 1024}, {"tile_size", 1024}}, "max_image_tokens");
  expect_error(nlohmann::json::array(), "JSON object");
  // min_tiles > max_tiles is fine when splitting is off (HF checks it only then).
  EXPECT_NO_THROW(ProcessorConfig::from_json({{"min_tiles", 5}, {"max_tiles", 2}, {"do_image_splitting", false}}));
}

TEST(ImageLayout, SingleTileHasNoGridMarkersAndMissingMarkersAreNamed) {
  ProcessorConfig cfg;
  Image img{40, 30, std::vector<uint8_t>(40 * 30 * 3, 7)};
  const PreprocessedImage out = preprocess(img, cfg);
  ASSERT_EQ(out.tiles.size(), 1u);
  FakeVocab vocab;
  const auto layout = image_token_layout(out, vocab.markers(), 2);
  EXPECT_EQ(layout.front(), vocab.ids.at("<|image_start|>"));
  EXPECT_EQ(layout.back(), vocab.ids.at("<|image_end|>"));
  EXPECT_EQ(int(layout.size()), 2 + out.tiles[0].tokens(2));
  // A tokenizer without <image> cannot be used; one without the start marker fails when needed.
  EXPECT_THROW(resolve_image_markers([](std::string_view) { return std::nullopt; }), Error);
  ImageMarkerIds ids = vocab.markers();
  ids.image_start = -1;
  try {
    image_token_layout(out, ids, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("<|image_start|>"), std::string::npos);
  }
}

TEST(ImagePreprocess, OneByOneGridFromMinTilesOneIsRefusedClearly) {
  ProcessorConfig cfg;
  cfg.tile_size = 64;
  cfg.min_image_tokens = 4;
  cfg.max_image_tokens = 16;
  cfg.min_tiles = 1;
  cfg.max_tiles = 1;  // splitting stays on (do_image_splitting) but only 1x1 exists → HF's "no split"
  Image img{300, 200, std::vector<uint8_t>(300 * 200 * 3, 1)};
  EXPECT_EQ(preprocess(img, cfg).tiles.size(), 1u);
  cfg.max_tiles = 2;  // 1x1 now wins for a square image: a 4-token tile, a 16-token prompt
  Image square{400, 400, std::vector<uint8_t>(400 * 400 * 3, 1)};
  EXPECT_THROW(preprocess(square, cfg), Error);
  // LFM2-VL's own sizes agree (a 512 tile and smart_resize's 512x512 are both 256 tokens).
  ProcessorConfig lfm;
  lfm.min_tiles = 1;
  lfm.max_tiles = 2;
  Image big{1000, 1000, std::vector<uint8_t>(1000 * 1000 * 3, 1)};
  const PreprocessedImage one = preprocess(big, lfm);
  ASSERT_EQ(one.tiles.size(), 1u);
  EXPECT_EQ(one.tiles[0].tokens(2), 256);
  EXPECT_FALSE(one.thumbnail);
}

}  // namespace
}  // namespace lfm::image
