// LFM2.5-Audio's detokenizer (model/detokenizer.h) against transformers' Lfm2AudioDetokenizer
// (tests/data/audio/detokenizer_tiny: a tiny random checkpoint, float32; README.md there): the
// upsampled rows, the stack's final hidden rows, lin's output and the waveform of two code
// sequences (3 frames; 23 frames = 138 rows, past the window of 30) within 1e-4, on every CPU
// level the machine has, the fake device (with and without replay) and the CUDA emulator.
// Streaming: the samples DetokenizerStreams hands out, concatenated, are decode()'s bits for any
// chunking and beside other streams. Errors name the offending value.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu_backend.h"
#include "model/detokenizer.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

using nlohmann::json;
constexpr double kTol = 1e-4;

std::string folder() { return test::data_dir() + "/audio/detokenizer_tiny"; }

template <typename T>
std::vector<T> read_output(const json& desc) {
  size_t n = 1;
  for (const json& d : desc["shape"]) n *= d.get<size_t>();
  const std::string bytes = test::read_file(folder() + "/" + desc["file"].get<std::string>());
  if (bytes.size() != n * sizeof(T)) throw Error("test: " + desc["file"].get<std::string>() + " has the wrong size");
  std::vector<T> out(n);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= worst)) worst = std::fabs(got[i] - want[i]), at = i;
  EXPECT_LE(worst, kTol) << what << ": worst difference at element " << at << " (" << got[at] << " vs " << want[at]
                         << ")";
}

std::vector<int32_t> random_codes(int64_t frames, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> codes(static_cast<size_t>(frames * Detokenizer::kCodebooks));
  for (int32_t& c : codes) c = static_cast<int32_t>(rng() % Detokenizer::kCodes);
  return codes;
}

class DetokenizerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& name = GetParam();
    if (name == "fake-device" || name == "fake-device-replay" || name == "cuda" || name == "cuda-emu") {
      std::string why;
      be_ = test::make_named_backend(name, pool_, load_, &why);
      if (!be_) GTEST_SKIP() << why;
    } else {
      if (!isa_supported(parse_isa(name))) GTEST_SKIP() << "CPU lacks " << name;
      be_ = make_backend_for(parse_isa(name), pool_);
    }
    det_ = Detokenizer::load(folder(), load_);
    ref_ = test::read_json(folder() + "/reference.json");
  }
  ThreadPool pool_{2};
  LoadOptions load_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Detokenizer> det_;
  json ref_;
};

TEST_P(DetokenizerTest, WaveformAndStagesMatchTransformers) {
  EXPECT_EQ(det_->sample_rate(), 24000);
  EXPECT_EQ(det_->samples_per_frame(), 1920);
  EXPECT_EQ(det_->config().window(1), 30);
  EXPECT_EQ(det_->config().window(0), 0);
  for (const json& s : ref_["sequences"]) {
    const std::string name = s["name"];
    const auto codes = read_output<int32_t>(s["codes"]);
    Detokenizer::Trace trace;
    const std::vector<float> wave = det_->decode(*be_, codes, &trace);
    expect_close(trace.upsampled, read_output<float>(s["upsampled"]), name + " upsampled rows");
    expect_close(trace.hidden, read_output<float>(s["hidden"]), name + " last_hidden_state");
    expect_close(trace.spectrum, read_output<float>(s["lin"]), name + " lin output");
    expect_close(wave, read_output<float>(s["waveform"]), name + " waveform");
    EXPECT_EQ(static_cast<int64_t>(wave.size()), s["frames"].get<int64_t>() * 1920);
  }
}

// Streams fed in chunks of 1, 7 and all frames at once, three at a time in one push, give
// decode()'s samples bit for bit; each push hands out every sample that is final then.
TEST_P(DetokenizerTest, StreamsGiveDecodesBitsForAnyChunking) {
  if (!be_->bitwise_batch_invariant()) GTEST_SKIP() << be_->name() << " is not bitwise batch invariant";
  const int64_t lens[] = {23, 50, 9};  // 50 frames = 300 rows
  std::vector<std::vector<int32_t>> codes;
  std::vector<std::vector<float>> want;
  for (size_t i = 0; i < std::size(lens); ++i) {
    codes.push_back(random_codes(lens[i], 7 + i));
    want.push_back(det_->decode(*be_, codes.back()));
  }
  const int64_t chunkings[][3] = {{1, 7, 1000}, {7, 1000, 1}, {1000, 1, 7}};
  for (const auto& chunk : chunkings) {
    DetokenizerStreams streams(*det_, *be_, 4, 64);
    const int spare = streams.open();  // open and idle beside the others
    std::vector<int> ids;
    std::vector<int64_t> fed(std::size(lens), 0);
    std::vector<std::vector<float>> got(std::size(lens));
    for (size_t i = 0; i < std::size(lens); ++i) ids.push_back(streams.open());
    for (bool more = true; more;) {
      more = false;
      std::vector<std::pair<int, std::span<const int32_t>>> batch;
      std::vector<size_t> which;
      for (size_t i = 0; i < std::size(lens); ++i) {
        const int64_t n = std::min(chunk[i], lens[i] - fed[i]);
        if (n <= 0) continue;
        batch.emplace_back(ids[i], std::span<const int32_t>(codes[i]).subspan(static_cast<size_t>(fed[i] * 8),
                                                                             static_cast<size_t>(n * 8)));
        which.push_back(i);
        fed[i] += n;
        more = true;
      }
      std::vector<std::vector<float>> out;
      streams.push(batch, out);
      ASSERT_EQ(out.size(), batch.size());
      for (size_t b = 0; b < which.size(); ++b) {
        got[which[b]].insert(got[which[b]].end(), out[b].begin(), out[b].end());
        EXPECT_EQ(static_cast<int64_t>(got[which[b]].size()), fed[which[b]] * 1920 - 480);
      }
    }
    for (size_t i = 0; i < std::size(lens); ++i) {
      const auto tail = streams.finish(ids[i]);
      EXPECT_EQ(tail.size(), 480u);
      got[i].insert(got[i].end(), tail.begin(), tail.end());
      EXPECT_EQ(got[i], want[i]) << "stream " << i << " in chunks of " << chunk[i];
      streams.close(ids[i]);
    }
    EXPECT_TRUE(streams.finish(spare).empty());
    streams.close(spare);
    EXPECT_EQ(streams.open_streams(), 0);
  }
}

TEST_P(DetokenizerTest, ErrorsNameTheOffendingValue) {
  const auto expect_error = [](const auto& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one naming " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::vector<int32_t> codes = random_codes(3, 1);
  codes[13] = 2048;
  expect_error([&] { det_->decode(*be_, codes); }, "code 2048");
  codes[13] = -5;
  expect_error([&] { det_->decode(*be_, codes); }, "code -5");
  expect_error([&] { det_->decode(*be_, std::span<const int32_t>(codes).first(12)); }, "12 codes");
  EXPECT_TRUE(det_->decode(*be_, {}).empty());

  DetokenizerStreams streams(*det_, *be_, 2, 4);
  const int a = streams.open(), b = streams.open();
  expect_error([&] { streams.open(); }, "all 2 streams");
  std::vector<std::vector<float>> out;
  const auto good = random_codes(3, 2);
  const std::pair<int, std::span<const int32_t>> bad_code[] = {{a, good}, {b, codes}};
  expect_error([&] { streams.push(bad_code, out); }, "code -5");
  const std::pair<int, std::span<const int32_t>> twice[] = {{a, good}, {a, good}};
  expect_error([&] { streams.push(twice, out); }, "stream 0 appears twice");
  const std::pair<int, std::span<const int32_t>> first[] = {{a, good}};
  streams.push(first, out);  // 3 frames (the failed pushes changed nothing)
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].size(), 3u * 1920 - 480);
  expect_error([&] { streams.push(first, out); }, "would reach 6 frames, past its max_frames 4");
  const std::pair<int, std::span<const int32_t>> unknown[] = {{7, good}};
  expect_error([&] { streams.push(unknown, out); }, "stream 7");
  streams.finish(a);
  expect_error([&] { streams.push(first, out); }, "after its finish");
  streams.close(a);
  expect_error([&] { streams.close(a); }, "stream 0, which is not open");
  EXPECT_EQ(streams.open(), a);  // its slot again
}

std::vector<std::string> backends() {
  std::vector<std::string> out = test::all_isas();
  out.push_back("fake-device");
  out.push_back("fake-device-replay");
  out.push_back("cuda");
#if LFM_HAVE_CUDA_EMU
  out.push_back("cuda-emu");
#endif
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, DetokenizerTest, ::testing::ValuesIn(backends()), [](const auto& info) {
  std::string s = info.param;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
});

// ---- config: sliding_attention layers ----

TEST(DetokenizerConfigTest, SlidingAttentionLayersTakeTheWindow) {
  json j = test::read_json(folder() + "/config.json");
  j["architectures"] = json::array({"Lfm2Model"});  // the stack's config as a plain LFM2 base model
  const ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.layer_pattern(), "cAcA");
  EXPECT_EQ(c.layer_window, (std::vector<int64_t>{0, 30, 0, 30}));
  EXPECT_EQ(c.to_json()["layer_types"][1], "sliding_attention");
  j["layer_types"][3] = "full_attention";
  EXPECT_EQ(parse_model_config(j).layer_window, (std::vector<int64_t>{0, 30, 0, 0}));
  j["layer_types"][1] = "full_attention";
  EXPECT_TRUE(parse_model_config(j).layer_window.empty());
  j["layer_types"][1] = "sliding_attention";
  j.erase("sliding_window");
  EXPECT_THROW(parse_model_config(j), Error);
  j["sliding_window"] = 0;
  EXPECT_THROW(parse_model_config(j), Error);
}

}  // namespace
}  // namespace lfm
