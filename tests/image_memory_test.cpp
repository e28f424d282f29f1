// Image memory budgets (issue 55, class 4), below the server: headers read without decoding, the
// memory model's figures (image/image_memory.h) against what decoding and preprocessing really
// take, the shared budget (core/memory_budget.h), the server's per-request and server-wide checks
// (413, 429 with Retry-After) before anything is decoded, and the allocator settings that give
// freed memory back (core/allocator.h).
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <tuple>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/memory_budget.h"
#include "image/image.h"
#include "image/image_memory.h"
#include "image/lfm2vl_preprocess.h"
#include "server/api_types.h"
#include "server/chat_images.h"
#include "test_util.h"

namespace lfm {
namespace {

std::vector<uint8_t> bytes_of(const std::string& path) {
  const std::string s = test::read_file(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}
std::string bomb_path() { return test::data_dir() + "/image/files/bomb_8000x8000.png"; }
std::string vl_image(const std::string& name) { return test::data_dir() + "/hf_vl/images/" + name; }

std::string b64(const std::vector<uint8_t>& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes.data(), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

int64_t status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  const std::string key = std::string(field) + ":";
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  return -1;
}

TEST(ImageMemory, HeadersGiveTheSizeWithoutDecoding) {
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t before = status_kb("VmRSS");
  const image::ImageHeader h = image::read_image_header(bytes_of(bomb_path()));
  EXPECT_LT(status_kb("VmHWM") - before, 16 * 1024) << "the header read allocated pixels";
  EXPECT_STREQ(h.format, "PNG");
  EXPECT_EQ(h.width, 8000);
  EXPECT_EQ(h.height, 8000);
  for (const auto& [file, format, w, h2] : std::vector<std::tuple<std::string, const char*, int, int>>{
           {vl_image("large_1100x620.jpg"), "JPEG", 1100, 620},
           {vl_image("lossless_100x150.webp"), "WebP", 100, 150},
           {test::data_dir() + "/image/files/animated.webp", "WebP", 0, 0}}) {
    const std::vector<uint8_t> b = bytes_of(file);
    const image::ImageHeader x = image::read_image_header(b);
    const image::Image im = image::decode_image(b);
    EXPECT_STREQ(x.format, format) << file;
    // The decoder allocates for the header's size (an EXIF rotation may swap the sides).
    EXPECT_EQ(int64_t(x.width) * x.height, int64_t(im.width) * im.height) << file;
    if (w) {
      EXPECT_EQ(x.width, w) << file;
      EXPECT_EQ(x.height, h2) << file;
    }
  }
  image::DecodeLimits small;
  small.max_pixels = 1 << 20;
  try {
    image::read_image_header(bytes_of(bomb_path()), small);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8000x8000 exceeds the 1-megapixel limit"), std::string::npos) << e.what();
  }
  EXPECT_THROW(image::read_image_header(std::vector<uint8_t>{'G', 'I', 'F', '8'}), Error);
}

TEST(ImageMemory, TheModelBoundsWhatDecodingAndPreprocessingTake) {
#if defined(__SANITIZE_ADDRESS__)
  // ASan's allocator adds redzones and a quarantine to every block, so RSS measures it, not the
  // code; the release build runs this test.
  GTEST_SKIP() << "RSS under ASan measures its allocator: run in the release build";
#endif
  const image::ProcessorConfig config;  // LFM2-VL's
  const std::vector<uint8_t> b = bytes_of(vl_image("large_1100x620.jpg"));
  const image::ImageHeader h = image::read_image_header(b);
  const int64_t estimate = image::images_memory(std::span(&h, 1), config);
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t before = status_kb("VmRSS");
  {
    const image::Image im = image::decode_image(b);
    const image::PreprocessedImage pre = image::preprocess(im, config);
    EXPECT_FALSE(pre.tiles.empty());
  }
  const int64_t peak = (status_kb("VmHWM") - before) * 1024;
  EXPECT_LE(peak, estimate) << "measured " << peak << " bytes, estimated " << estimate;
  // The bomb: 192 MB of RGB held, float32 planes of 768 MB on top while it is preprocessed.
  const image::ImageHeader bomb{"PNG", 8000, 8000};
  const image::ImageMemory m = image::image_memory(bomb, config);
  EXPECT_GE(m.held, 3LL * 8000 * 8000);
  EXPECT_GE(m.working, 12LL * 8000 * 8000);
  std::vector<image::ImageHeader> eight(8, bomb);
  EXPECT_EQ(image::images_memory(eight, config), (8 * m.held + m.working) * 17 / 16);
  EXPECT_GT(image::images_memory(eight, config), image::kDefaultRequestImageMemory);
  try {
    image::check_images_memory(eight, config, image::kDefaultRequestImageMemory, "images", "raise it");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8 images (8000x8000 PNG, 8000x8000 PNG"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("over the limit of 1.0 GiB (raise it)"), std::string::npos) << e.what();
  }
}

TEST(MemoryBudgetTest, ReservationsAreSharedAndGivenBack) {
  MemoryBudget b(100);
  auto r1 = b.try_reserve(60);
  ASSERT_TRUE(r1);
  EXPECT_FALSE(b.try_reserve(41));
  auto r2 = b.try_reserve(40);
  ASSERT_TRUE(r2);
  EXPECT_EQ(b.in_use(), 100);
  r1->release();
  EXPECT_EQ(b.in_use(), 40);
  {
    auto moved = std::move(*r2);
    EXPECT_EQ(moved.bytes(), 40);
    EXPECT_EQ(r2->bytes(), 0);
  }
  EXPECT_EQ(b.in_use(), 0);
  EXPECT_FALSE(b.try_reserve(101));
  EXPECT_FALSE(b.try_reserve(INT64_MAX));
  // Many threads at once never take it past its capacity.
  std::vector<std::thread> ts;
  std::atomic<int> over{0};
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto r = b.try_reserve(30);
        if (b.in_use() > 100) ++over;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(over.load(), 0);
  EXPECT_EQ(b.in_use(), 0);
}

// The server's checks, before any image is decoded: over the request's limit 413; over the
// server's total 413; within both but not next to what other requests hold, 429 with Retry-After.
TEST(ServerImageBudget, RefusalsComeFromTheHeaders) {
  using server::ApiError;
  server::ImageOptions o;
  const std::string bomb = "data:image/png;base64," + b64(bytes_of(bomb_path()));
  const std::string small = "data:image/jpeg;base64," + b64(bytes_of(vl_image("large_1100x620.jpg")));
  const std::vector<server::ImagePart> bombs(3, server::ImagePart{bomb, "p"});
  const image::ProcessorConfig config;
  auto status_of = [&](const std::vector<server::ImagePart>& parts, MemoryBudget* b, ApiError* out = nullptr) {
    try {
      server::load_image_parts(parts, o, "", config, b);
    } catch (const ApiError& e) {
      if (out) *out = e;
      return e.status;
    }
    return 200;
  };
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t before = status_kb("VmRSS");
  ApiError e(0, "");
  EXPECT_EQ(status_of(bombs, nullptr, &e), 413);
  EXPECT_NE(std::string(e.what()).find("--image-memory-per-request"), std::string::npos) << e.what();
  EXPECT_EQ(e.retry_after_s, 0);
  EXPECT_EQ(e.param, "messages");
  EXPECT_LT(status_kb("VmHWM") - before, 32 * 1024) << "refused after decoding";

  // One small image needs a few tens of MB.
  const std::vector<server::ImagePart> one = {{small, "q"}};
  const image::ImageHeader h = image::read_image_header(bytes_of(vl_image("large_1100x620.jpg")));
  const int64_t need = image::images_memory(std::span(&h, 1), config);
  MemoryBudget tight(need - 1);
  EXPECT_EQ(status_of(one, &tight, &e), 413);
  EXPECT_NE(std::string(e.what()).find("--image-memory)"), std::string::npos) << e.what();
  MemoryBudget shared(need + need / 2);
  {
    auto held = shared.try_reserve(need);  // another request's images
    EXPECT_EQ(status_of(one, &shared, &e), 429);
    EXPECT_EQ(e.retry_after_s, 1);
    EXPECT_EQ(e.param, "q");
    EXPECT_NE(std::string(e.what()).find("retry"), std::string::npos) << e.what();
  }
  {
    server::LoadedImages l = server::load_image_parts(one, o, "", config, &shared);
    EXPECT_EQ(l.images.size(), 1u);
    EXPECT_EQ(l.memory.bytes(), need);
    EXPECT_EQ(shared.in_use(), need);
  }
  EXPECT_EQ(shared.in_use(), 0);
}

// With the server's settings, large blocks freed by a thread go back to the system even when
// small blocks it still holds sit between them (without them glibc keeps such blocks in the
// thread's arena once its dynamic mmap threshold has risen). Run in a child process: the settings
// and the arenas are process-wide.
int64_t retained_after_fragmented_frees(bool configured) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (configured && !configure_allocator(AllocatorSettings())) ::_exit(255);
    {
      void* p = std::malloc(30u << 20);  // a large block freed earlier raises glibc's threshold
      static_cast<volatile char*>(p)[0] = 1;
      std::free(p);
    }
    const int64_t before = resident_bytes();
    int64_t kept = 0;
    std::thread([&] {
      std::vector<void*> big, small;
      for (int i = 0; i < 48; ++i) {
        big.push_back(std::malloc(8u << 20));
        std::memset(big.back(), 1, 8u << 20);
        small.push_back(std::malloc(64));  // still held when the big ones go
      }
      for (void* p : big) std::free(p);
      kept = resident_bytes() - before;
      for (void* p : small) std::free(p);
    }).join();
    ::_exit(static_cast<int>(std::min<int64_t>(kept >> 20, 254)));  // MB, 254: that much or more
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(AllocatorSettingsTest, FreedLargeBlocksGoBackToTheSystem) {
#if defined(__SANITIZE_ADDRESS__)
  // ASan replaces malloc: glibc's mallopt settings do not reach its allocator.
  GTEST_SKIP() << "glibc malloc settings: run in the release build";
#endif
  const int64_t with = retained_after_fragmented_frees(true);
  const int64_t without = retained_after_fragmented_frees(false);
  ASSERT_NE(with, 255) << "mallopt refused the settings";
  EXPECT_LT(with, 32) << "MB kept with the settings (" << without << " MB without)";
  std::printf("allocator: %lld MB of 384 MB freed kept with the settings, %lld MB without\n",
              static_cast<long long>(with), static_cast<long long>(without));
}

}  // namespace
}  // namespace lfm
