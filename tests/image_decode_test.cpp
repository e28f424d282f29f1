// The decoders against PIL (transformers' load_image: exif_transpose + convert("RGB")) on every
// mode the reference generator writes, and the hostile files: each refused with a clear
// lfm::Error, before a large allocation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "image/image.h"
#include "image_test_util.h"

namespace lfm::image {
namespace {

using test::image_file;
using test::image_reference;

std::vector<uint8_t> file_bytes(const std::string& name) {
  const std::string s = test::read_file(image_file(name));
  return {s.begin(), s.end()};
}

// Decodes a file and compares it with PIL's pixels; on a mismatch, says where.
void expect_like_pil(const std::string& name) {
  SCOPED_TRACE(name);
  const auto& ref = image_reference()["decode"][name];
  ASSERT_FALSE(ref.contains("error")) << ref.dump();
  const Image img = load_image_file(image_file(name));
  ASSERT_EQ(img.width, ref["width"].get<int>());
  ASSERT_EQ(img.height, ref["height"].get<int>());
  ASSERT_EQ(img.rgb.size(), size_t(img.width) * img.height * 3);
  if (ref.contains("rgb_base64")) {
    const std::string pil = test::base64_decode(ref["rgb_base64"]);
    ASSERT_EQ(pil.size(), img.rgb.size());
    int bad = 0, max_diff = 0;
    size_t first = 0;
    for (size_t i = 0; i < pil.size(); ++i) {
      const int d = std::abs(int(uint8_t(pil[i])) - int(img.rgb[i]));
      if (d && !bad++) first = i;
      max_diff = std::max(max_diff, d);
    }
    EXPECT_EQ(bad, 0) << "first at pixel " << first / 3 << " channel " << first % 3 << ", max diff " << max_diff;
  }
  EXPECT_EQ(test::sha256_of(img.rgb), ref["sha256"].get<std::string>());
}

class ImageDecodeVsPil : public ::testing::TestWithParam<std::string> {};

TEST_P(ImageDecodeVsPil, SamePixels) { expect_like_pil(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    ImageJpeg, ImageDecodeVsPil,
    ::testing::Values("rgb_420.jpg", "rgb_444.jpg", "rgb_422_progressive.jpg", "grey.jpg", "cmyk.jpg",
                      "exif_orientation_1.jpg", "exif_orientation_2.jpg", "exif_orientation_3.jpg",
                      "exif_orientation_4.jpg", "exif_orientation_5.jpg", "exif_orientation_6.jpg",
                      "exif_orientation_7.jpg", "exif_orientation_8.jpg", "exif_orientation_6_bigendian_long.jpg",
                      "photo_640x480.jpg", "photo_97x61.jpg"),
    [](const auto& info) { return std::string(info.param).substr(0, info.param.find('.')); });

INSTANTIATE_TEST_SUITE_P(
    ImagePng, ImageDecodeVsPil,
    ::testing::Values("grey1.png", "grey2.png", "grey4.png", "grey8.png", "grey16.png", "grey16_low.png",
                      "grey8_trns.png", "grey_alpha8.png", "grey_alpha16.png", "rgb8.png", "rgb8_trns.png", "rgb16.png",
                      "rgba8.png", "rgba16.png", "palette1.png", "palette2.png", "palette4.png", "palette8.png",
                      "palette_index_out_of_range.png", "rgb8_interlaced.png", "grey2_interlaced.png",
                      "rgba16_interlaced.png", "exif_orientation_8.png", "xmp_orientation_5.png",
                      "raw_profile_orientation_3.png"),
    [](const auto& info) { return std::string(info.param).substr(0, info.param.find('.')); });

INSTANTIATE_TEST_SUITE_P(
    ImageWebp, ImageDecodeVsPil,
    ::testing::Values("lossy.webp", "lossless.webp", "alpha_lossy.webp", "alpha_lossless.webp", "animated.webp",
                      "exif_orientation_6.webp"),
    [](const auto& info) { return std::string(info.param).substr(0, info.param.find('.')); });

// ---- hostile input ----

// Peak resident memory (VmHWM) reset and read through /proc (Linux): the growth while decoding.
int64_t peak_rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }
int64_t current_rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

// Decoding `name` throws an lfm::Error whose message contains `expect`, and the process's peak
// memory grows by less than 32 MB meanwhile.
void expect_refused(const std::string& name, const std::string& expect, const DecodeLimits& limits = {}) {
  SCOPED_TRACE(name);
  const std::vector<uint8_t> bytes = file_bytes(name);
  ASSERT_FALSE(bytes.empty());
  reset_peak_rss();
  const int64_t before = current_rss_kb();
  try {
    decode_image(bytes, limits);
    ADD_FAILURE() << "decoded without an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("image: ", 0), 0u) << e.what();
  }
  const int64_t peak = peak_rss_kb();
  if (before > 0 && peak > 0) {
    EXPECT_LT(peak - before, 32 * 1024) << "peak RSS grew by " << (peak - before) << " kB";
  }
}

TEST(ImageHostile, TruncatedFiles) {
  expect_refused("truncated.jpg", "truncated");
  expect_refused("truncated_header.jpg", "JPEG");
  expect_refused("truncated.png", "truncated");
  expect_refused("truncated.webp", "WebP");
  // PIL refuses them too.
  for (const char* n : {"truncated.jpg", "truncated.png", "truncated.webp", "truncated_header.jpg"})
    EXPECT_TRUE(image_reference()["decode"][n].contains("error")) << n;
}

TEST(ImageHostile, WrongMagic) {
  expect_refused("wrong_magic.bin", "unknown format");
  EXPECT_THROW(decode_image({}), Error);
  const uint8_t jpeg_magic_only[] = {0xFF, 0xD8, 0xFF};
  EXPECT_THROW(decode_image(jpeg_magic_only), Error);
}

TEST(ImageHostile, HugeHeadersRefusedBeforeDecoding) {
  expect_refused("huge_header.png", "PNG 100000x100000 exceeds the 32768-pixel side limit");
  expect_refused("huge_header.jpg", "JPEG 65000x65000 exceeds");
  expect_refused("huge_canvas.webp", "WebP 30000x30000 exceeds the 64-megapixel limit");
  DecodeLimits wide;
  wide.max_side = 1 << 20;
  expect_refused("huge_header.png", "PNG 100000x100000 exceeds the 64-megapixel limit", wide);
}

TEST(ImageHostile, DecompressionBombRefusedFromItsHeader) {
  // 8 KB of file, 8000x8000 pixels: under the default limit, refused under a 16-megapixel one
  // before any pixel buffer exists.
  DecodeLimits limits;
  limits.max_pixels = 16LL << 20;
  expect_refused("bomb_8000x8000.png", "PNG 8000x8000 exceeds the 16-megapixel limit", limits);
  DecodeLimits tiny;
  tiny.max_file_bytes = 100;
  expect_refused("bomb_8000x8000.png", "exceeds the 100-byte limit", tiny);
}

TEST(ImageHostile, EveryPrefixOfEveryFormatIsRefusedOrDecoded) {
  // Cutting a valid file anywhere must give an Error (or, past the last needed byte, the image),
  // never a crash — the sanitizer build makes this a memory-safety check of the error paths.
  for (const char* name : {"rgb_422_progressive.jpg", "cmyk.jpg", "rgba16_interlaced.png", "palette2.png",
                           "alpha_lossy.webp", "animated.webp"}) {
    const std::vector<uint8_t> bytes = file_bytes(name);
    const size_t step = std::max<size_t>(1, bytes.size() / 97);
    for (size_t n = 0; n < bytes.size(); n += step) {
      try {
        const Image img = decode_image(std::span(bytes.data(), n));
        EXPECT_EQ(img.rgb.size(), size_t(img.width) * img.height * 3);
      } catch (const Error&) {
      }
    }
  }
}

TEST(ImageDecode, LoadImageFileErrorsNameThePath) {
  try {
    load_image_file(test::data_dir() + "/image/no_such_file.png");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_file.png"), std::string::npos) << e.what();
  }
  DecodeLimits small;
  small.max_file_bytes = 10;
  EXPECT_THROW(load_image_file(image_file("rgb8.png"), small), Error);
}

}  // namespace
}  // namespace lfm::image

namespace lfm::image {
namespace {

// Every input in fuzz/regressions/image (first byte: the harness's config choice, then the file)
// decodes or is refused with an lfm::Error, as fuzz_image.cpp requires, in bounded memory.
TEST(ImageHostile, FuzzRegressionsAreRefusedOrDecoded) {
  const std::filesystem::path dir = std::filesystem::path(LFM_SOURCE_DIR) / "fuzz/regressions/image";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir;
  DecodeLimits limits;
  limits.max_pixels = 1 << 20;
  limits.max_side = 4096;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string s = test::read_file(e.path());
    if (s.empty()) continue;
    reset_peak_rss();
    const int64_t before = current_rss_kb();
    try {
      const Image img = decode_image(std::span(reinterpret_cast<const uint8_t*>(s.data()) + 1, s.size() - 1), limits);
      EXPECT_EQ(img.rgb.size(), size_t(img.width) * img.height * 3) << e.path();
    } catch (const Error&) {
    }
    // Bounded memory (png-itxt-length once made libpng allocate 2 GB from a chunk's claimed length).
    EXPECT_LT(peak_rss_kb() - before, 64 * 1024) << e.path();
  }
}

}  // namespace
}  // namespace lfm::image
