// Kyutai's Mimi decoder (model/mimi.h) against transformers' MimiModel.decode
// (tests/data/audio/mimi_tiny: a tiny random MimiModel, float32; README.md there): the codebook
// sums, the quantizer's output, the upsample, the decoder transformer, the SEANet's stages and the
// waveform of three clips (1, 7 and 14 frames: 2, 14, 28 positions, the window 5), with the
// sliding window (decode_window) and without (decode_v520: the window set past the clip), on every
// CPU level the machine has and the fake device. moshi's layout gives the same bits as
// transformers'; streams give decode()'s bits for any chunking beside other streams; refusals
// name the offending value, tensor or field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "kernels/cpu_backend.h"
#include "kernels/dequant.h"
#include "model/mimi.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string folder() { return test::data_dir() + "/audio/mimi_tiny"; }

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

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= worst)) worst = std::fabs(got[i] - want[i]), at = i;
  EXPECT_LE(worst, tol) << what << ": worst difference at element " << at << " (" << got[at] << " vs " << want[at] << ")";
}

std::vector<int32_t> random_codes(int64_t frames, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> codes(static_cast<size_t>(frames * MimiDecoder::kCodebooks));
  for (int32_t& c : codes) c = static_cast<int32_t>(rng() % 2048);
  return codes;
}

// A copy of the fixture's transformers folder with config.json edited by `edit`.
void copy_with_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  json j = test::read_json(folder() + "/config.json");
  edit(j);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << j.dump(2);
  fs::copy_file(fs::path(folder()) / "model.safetensors", dir / "model.safetensors");
}

// A copy of a safetensors file with tensors dropped or reshaped: `reshape` maps a name to its new
// shape (its values zeros), `drop` names tensors left out.
void rewrite_safetensors(const std::string& from, const std::string& to, const std::vector<std::string>& drop,
                         const std::map<std::string, std::vector<int64_t>>& reshape) {
  const SafetensorsFile src(from);
  std::vector<SafetensorsWriter::Entry> entries;
  for (const std::string& n : src.names()) {
    if (std::find(drop.begin(), drop.end(), n) != drop.end()) continue;
    const auto it = reshape.find(n);
    entries.push_back({n, DType::F32, it != reshape.end() ? it->second : src.find(n)->shape});
  }
  SafetensorsWriter w(to, entries);
  for (const auto& e : entries) {
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    std::vector<float> v(static_cast<size_t>(numel), 0.0f);
    if (!reshape.count(e.name)) dequantize_row(src.find(e.name)->dtype, src.find(e.name)->data, v.data(), numel);
    w.write(e.name, v.data(), v.size() * sizeof(float));
  }
  w.finish();
}

class MimiDecoderTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& name = GetParam();
    if (name == "fake-device") {
      std::string why;
      be_ = test::make_named_backend(name, pool_, load_, &why);
      if (!be_) GTEST_SKIP() << why;
    } else {
      if (!isa_supported(parse_isa(name))) GTEST_SKIP() << "CPU lacks " << name;
      be_ = make_backend_for(parse_isa(name), pool_);
    }
    dec_ = MimiDecoder::load(folder());
    ref_ = test::read_json(folder() + "/reference.json");
  }
  ThreadPool pool_{2};
  LoadOptions load_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<MimiDecoder> dec_;
  json ref_;
};

TEST_P(MimiDecoderTest, WaveformAndStagesMatchTransformers) {
  EXPECT_EQ(dec_->sample_rate(), 24000);
  EXPECT_EQ(dec_->samples_per_frame(), 1920);
  EXPECT_EQ(dec_->attention_window(), 5);
  EXPECT_EQ(dec_->max_frames(), 4000);
  const double wave_tol = ref_["tolerances"]["waveform_abs"].get<double>();
  const double tol = ref_["tolerances"]["intermediates_abs"].get<double>();
  // decode_v520: transformers 5.2's mask ignores the window; the same decoder with a window past
  // the clips computes it.
  test::TempDir tmp("mimi_v520");
  copy_with_config(tmp.path(), [](json& j) { j["sliding_window"] = 1000; });
  const auto full = MimiDecoder::load(tmp.str());
  for (const json& clip : ref_["clips"]) {
    const std::string name = clip["name"];
    const auto codes = read_output<int32_t>(clip["codes"]);
    MimiDecoder::Trace tr;
    const std::vector<float> wave = dec_->decode(*be_, codes, &tr);
    expect_close(tr.semantic, read_output<float>(clip["semantic_sum"]), tol, name + " semantic_sum");
    expect_close(tr.acoustic, read_output<float>(clip["acoustic_sum"]), tol, name + " acoustic_sum");
    expect_close(tr.quantized, read_output<float>(clip["quantized"]), tol, name + " quantized");
    expect_close(tr.upsampled, read_output<float>(clip["upsampled"]), tol, name + " upsampled");
    expect_close(tr.transformed, read_output<float>(clip["decode_window"]["transformer"]), tol, name + " transformer");
    expect_close(wave, read_output<float>(clip["decode_window"]["waveform"]), wave_tol, name + " waveform");

    MimiDecoder::Trace tf;
    const std::vector<float> wave_full = full->decode(*be_, codes, &tf);
    expect_close(tf.transformed, read_output<float>(clip["decode_v520"]["transformer"]), tol, name + " v520 transformer");
    expect_close(wave_full, read_output<float>(clip["decode_v520"]["waveform"]), wave_tol, name + " v520 waveform");
    if (clip.contains("decoder_layers")) {
      // decoder.layers[0] (the first conv), then 3, 6, 9, 12 (each stage after its residual block).
      const char* keys[] = {"0", "3", "6", "9", "12"};
      ASSERT_EQ(tf.seanet.size(), std::size(keys));
      for (size_t s = 0; s < std::size(keys); ++s) {
        const std::vector<float> want = read_output<float>(clip["decoder_layers"][keys[s]]);
        float peak = 1.0f;
        for (float v : want) peak = std::max(peak, std::fabs(v));
        expect_close(tf.seanet[s], want, tol * peak, name + " decoder.layers." + keys[s]);
      }
    }
  }
}

TEST_P(MimiDecoderTest, MoshiLayoutGivesTheSameBits) {
  // The fixture's folder has the tiny config beside the moshi file; LFM2-Audio's folder would not.
  const auto moshi = MimiDecoder::load(folder() + "/moshi_format.safetensors");
  EXPECT_EQ(moshi->attention_window(), 5);
  for (const json& clip : ref_["clips"]) {
    const auto codes = read_output<int32_t>(clip["codes"]);
    EXPECT_EQ(moshi->decode(*be_, codes), dec_->decode(*be_, codes)) << clip["name"];
  }
  const auto longer = random_codes(20, 3);
  EXPECT_EQ(moshi->decode(*be_, longer), dec_->decode(*be_, longer));
}

TEST_P(MimiDecoderTest, StreamsGiveDecodesBitsForAnyChunking) {
  const int64_t lens[] = {23, 40, 9};
  std::vector<std::vector<int32_t>> codes;
  std::vector<std::vector<float>> want;
  for (size_t i = 0; i < std::size(lens); ++i) {
    codes.push_back(random_codes(lens[i], 11 + i));
    want.push_back(dec_->decode(*be_, codes.back()));
    ASSERT_EQ(want.back().size(), static_cast<size_t>(lens[i] * 1920));
  }
  std::mt19937 rng(5);
  for (int round = 0; round < 3; ++round) {
    auto streams = dec_->streams(*be_, 4, 64);
    const int spare = streams->open();  // open and idle beside the others
    std::vector<int> ids;
    std::vector<int64_t> fed(std::size(lens), 0);
    std::vector<std::vector<float>> got(std::size(lens));
    for (size_t i = 0; i < std::size(lens); ++i) ids.push_back(streams->open());
    for (bool more = true; more;) {
      more = false;
      std::vector<std::pair<int, std::span<const int32_t>>> batch;
      std::vector<size_t> which;
      for (size_t i = 0; i < std::size(lens); ++i) {
        const int64_t n = std::min<int64_t>(static_cast<int64_t>(rng() % 9), lens[i] - fed[i]);  // 0 .. 8 frames
        if (fed[i] >= lens[i]) continue;
        more = true;
        batch.emplace_back(ids[i], std::span<const int32_t>(codes[i]).subspan(static_cast<size_t>(fed[i] * 8),
                                                                             static_cast<size_t>(n * 8)));
        which.push_back(i);
        fed[i] += n;
      }
      if (batch.empty()) continue;
      std::vector<std::vector<float>> out;
      streams->push(batch, out);
      ASSERT_EQ(out.size(), batch.size());
      for (size_t b = 0; b < which.size(); ++b) {
        got[which[b]].insert(got[which[b]].end(), out[b].begin(), out[b].end());
        EXPECT_EQ(static_cast<int64_t>(got[which[b]].size()), fed[which[b]] * 1920);  // nothing held back
      }
    }
    for (size_t i = 0; i < std::size(lens); ++i) {
      EXPECT_TRUE(streams->finish(ids[i]).empty());
      EXPECT_EQ(got[i], want[i]) << "stream " << i << " in round " << round;
      streams->close(ids[i]);
    }
    EXPECT_TRUE(streams->finish(spare).empty());
    streams->close(spare);
    EXPECT_EQ(streams->open_streams(), 0);
  }
}

TEST_P(MimiDecoderTest, ErrorsNameTheOffendingValue) {
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
  expect_error([&] { dec_->decode(*be_, codes); }, "code 2048 (frame 1, codebook 5) is outside [0, 2048)");
  codes[13] = -5;
  expect_error([&] { dec_->decode(*be_, codes); }, "code -5");
  expect_error([&] { dec_->decode(*be_, std::span<const int32_t>(codes).first(12)); }, "12 codes");
  EXPECT_TRUE(dec_->decode(*be_, {}).empty());
  const std::vector<int32_t> too_long(static_cast<size_t>(4001 * 8), 0);
  expect_error([&] { dec_->decode(*be_, too_long); }, "4001 frames exceed the 4000");

  expect_error([&] { dec_->streams(*be_, 0, 4); }, "max_streams 0");
  expect_error([&] { dec_->streams(*be_, 2, 4001); }, "max_frames 4001");
  auto streams = dec_->streams(*be_, 2, 4);
  const int a = streams->open(), b = streams->open();
  expect_error([&] { streams->open(); }, "all 2 streams");
  std::vector<std::vector<float>> out;
  const auto good = random_codes(3, 2);
  const std::pair<int, std::span<const int32_t>> bad_code[] = {{a, good}, {b, codes}};
  expect_error([&] { streams->push(bad_code, out); }, "code -5");
  const std::pair<int, std::span<const int32_t>> twice[] = {{a, good}, {a, good}};
  expect_error([&] { streams->push(twice, out); }, "stream 0 appears twice");
  const std::pair<int, std::span<const int32_t>> first[] = {{a, good}};
  streams->push(first, out);  // 3 frames (the failed pushes changed nothing)
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], dec_->decode(*be_, good));
  expect_error([&] { streams->push(first, out); }, "would reach 6 frames, past its max_frames 4");
  const std::pair<int, std::span<const int32_t>> unknown[] = {{7, good}};
  expect_error([&] { streams->push(unknown, out); }, "stream 7");
  streams->finish(a);
  expect_error([&] { streams->push(first, out); }, "after its finish");
  expect_error([&] { streams->finish(a); }, "finished twice");
  streams->close(a);
  expect_error([&] { streams->close(a); }, "stream 0, which is not open");
  EXPECT_EQ(streams->open(), a);  // its slot again
}

std::vector<std::string> backends() {
  std::vector<std::string> out = test::all_isas();
  out.push_back("fake-device");  // runs on a CPU backend of the decoder's own
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, MimiDecoderTest, ::testing::ValuesIn(backends()), [](const auto& info) {
  std::string s = info.param;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
});

// ---- loading: files, layouts, refusals ----

void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    MimiDecoder::load(path);
    ADD_FAILURE() << "no error loading " << path << "; expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MimiLoadTest, CorruptFilesAreRefusedNamingTheTensor) {
  test::TempDir tmp("mimi_bad");
  fs::copy_file(folder() + "/config.json", tmp / "config.json");  // the tiny config applies to the files beside it
  const std::string moshi = folder() + "/moshi_format.safetensors", hf = folder() + "/model.safetensors";
  rewrite_safetensors(hf, (tmp / "missing.safetensors").string(), {"decoder.layers.5.conv.bias"}, {});
  expect_load_error((tmp / "missing.safetensors").string(), "missing tensor 'decoder.layers.5.conv.bias'");
  rewrite_safetensors(moshi, (tmp / "shape.safetensors").string(), {},
                      {{"decoder_transformer.transformer.layers.1.self_attn.in_proj_weight", {96, 31}}});
  expect_load_error((tmp / "shape.safetensors").string(),
                    "tensor 'decoder_transformer.transformer.layers.1.self_attn.in_proj_weight' has shape [96, 31], "
                    "expected [96, 32]");
  rewrite_safetensors(hf, (tmp / "notmimi.safetensors").string(),
                      {"quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum"}, {});
  expect_load_error((tmp / "notmimi.safetensors").string(), "holds no Mimi");
  EXPECT_FALSE(MimiDecoder::is_mimi_file((tmp / "notmimi.safetensors").string()));
  EXPECT_FALSE(MimiDecoder::is_mimi_file(folder() + "/config.json"));
  EXPECT_TRUE(MimiDecoder::is_mimi_file(moshi));
  EXPECT_TRUE(MimiDecoder::is_mimi_file(folder()));
}

TEST(MimiLoadTest, ConfigFieldsTheDecoderDoesNotComputeAreRefused) {
  const std::pair<std::function<void(json&)>, std::string> cases[] = {
      {[](json& j) { j["pad_mode"] = "reflect"; }, "pad_mode \"reflect\" is not supported"},
      {[](json& j) { j["use_causal_conv"] = false; }, "use_causal_conv false is not supported"},
      {[](json& j) { j["use_conv_shortcut"] = true; }, "use_conv_shortcut"},
      {[](json& j) { j["num_quantizers"] = 6; }, "num_quantizers 6"},
      {[](json& j) { j["model_type"] = "encodec"; }, "model_type 'encodec'"},
      {[](json& j) { j["hidden_size"] = j["upsample_groups"] = 48; }, "has shape [32, 6, 1], expected [48, 6, 1]"},  // every tensor is checked against the config
      {[](json& j) { j["sliding_window"] = 0; }, "sliding_window 0"},
  };
  for (const auto& [edit, needle] : cases) {
    test::TempDir tmp("mimi_cfg");
    copy_with_config(tmp.path(), edit);
    expect_load_error(tmp.str(), needle);
  }
}

TEST(MimiLoadTest, TheCheckpointFoldersMimiIsFoundByItsTensorNames) {
  test::TempDir tmp("mimi_find");
  EXPECT_EQ(MimiDecoder::find_in_folder(tmp.str()), "");
  // Another safetensors file (not a Mimi) and the Mimi under an arbitrary name.
  rewrite_safetensors(folder() + "/model.safetensors", (tmp / "aaa-other.safetensors").string(),
                      {"quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum"}, {});
  fs::copy_file(folder() + "/moshi_format.safetensors", tmp / "tokenizer-0123abcd-checkpoint1.safetensors");
  EXPECT_EQ(MimiDecoder::find_in_folder(tmp.str()), (tmp / "tokenizer-0123abcd-checkpoint1.safetensors").string());
  // Without a Mimi config beside it, a moshi file takes kyutai/mimi's (the tiny weights then do
  // not fit: the shape error names the real size).
  expect_load_error((tmp / "tokenizer-0123abcd-checkpoint1.safetensors").string(), "expected [2048, 256]");
}

}  // namespace
}  // namespace lfm
