// resize_bilinear_antialias against torch 1.13's interpolate(bilinear, align_corners=False,
// antialias=True): outputs of awkward shapes (up, down, mixed, sides of 1, 16 channels) made by
// tools/vl_reference/preprocess_reference.py. The inputs are regenerated here with the same
// float32 formula, so the comparison is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "image/resize.h"
#include "image_test_util.h"

namespace lfm::image {
namespace {

// float32(((i·2654435761) mod 2^32) >> 8) · float32(255 / 2^24), as gen_input in the generator.
std::vector<float> gen_input(size_t n) {
  std::vector<float> v(n);
  const float k = float(255.0 / 16777216.0);
  for (size_t i = 0; i < n; ++i) v[i] = float(uint32_t(uint64_t(i) * 2654435761ULL) >> 8) * k;
  return v;
}

TEST(ImageResize, MatchesTorchBitForBit) {
  const auto& cases = test::image_reference()["resize"];
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const int ch = c["channels"], h = c["h"], w = c["w"], oh = c["out_h"], ow = c["out_w"];
    SCOPED_TRACE(testing::Message() << ch << "x" << h << "x" << w << " -> " << oh << "x" << ow);
    const std::vector<float> src = gen_input(size_t(ch) * h * w);
    std::vector<float> dst(size_t(ch) * oh * ow, NAN);
    resize_bilinear_antialias(src.data(), ch, h, w, dst.data(), oh, ow);
    const std::string bytes = test::base64_decode(c["output_f32_base64"]);
    ASSERT_EQ(bytes.size(), dst.size() * 4);
    std::vector<float> ref(dst.size());
    std::memcpy(ref.data(), bytes.data(), bytes.size());
    double max_diff = 0;
    int differ = 0;
    for (size_t i = 0; i < dst.size(); ++i) {
      max_diff = std::max(max_diff, double(std::abs(dst[i] - ref[i])));
      differ += dst[i] != ref[i];
    }
    EXPECT_LE(max_diff, 1e-6 * 255);
    EXPECT_EQ(differ, 0) << "max diff " << max_diff;
  }
}

TEST(ImageResize, SameSizeIsIdentityAndConstantsStayConstant) {
  const std::vector<float> src = gen_input(3 * 5 * 7);
  std::vector<float> dst(src.size());
  resize_bilinear_antialias(src.data(), 3, 5, 7, dst.data(), 5, 7);
  EXPECT_EQ(dst, src);
  const std::vector<float> flat(2 * 9 * 13, 42.0f);
  std::vector<float> out(2 * 4 * 30);
  resize_bilinear_antialias(flat.data(), 2, 9, 13, out.data(), 4, 30);
  for (float v : out) EXPECT_NEAR(v, 42.0f, 1e-4);
}

TEST(ImageResize, RejectsEmptySizes) {
  float x = 0;
  EXPECT_THROW(resize_bilinear_antialias(&x, 1, 1, 1, &x, 0, 1), Error);
  EXPECT_THROW(resize_bilinear_antialias(&x, 0, 1, 1, &x, 1, 1), Error);
}

}  // namespace
}  // namespace lfm::image
