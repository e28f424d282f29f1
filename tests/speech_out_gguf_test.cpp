// LFM2.5-Audio's speech output as llama.cpp's vocoder GGUF (model/vocoder_gguf.h): what `lfm
// convert` writes (keys, names, types as llama.cpp's liquid-audio runner reads them), and the GGUF
// trio (backbone, mmproj, vocoder) giving transformers' greedy text and codes (tests/data/audio/
// lfm2audio_tts_tiny) when converted in F32; errors name what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "formats/gguf_reader.h"
#include "kernels/cpu_backend.h"
#include "model/model.h"
#include "model/speech_out.h"
#include "model/vocoder_gguf.h"
#include "engine_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

std::string tts_dir() { return test::data_dir() + "/audio/lfm2audio_tts_tiny"; }

class SpeechOutGguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_speech_gguf");
    for (const char* type : {"f32", "q8_0"}) {
      const auto r = test::run_lfm(std::string("convert -q -m '") + tts_dir() + "' -o '" + dir_->str() + "/tts-" + type +
                                   ".gguf' --type " + type);
      ASSERT_EQ(r.code, 0) << r.out;
    }
    // With its detokenizer (tests/data/audio/detokenizer_tiny as audio_detokenizer/).
    namespace fs = std::filesystem;
    const fs::path speak = fs::path(dir_->str()) / "speak";
    fs::create_directories(speak / "audio_detokenizer");
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
      fs::copy_file(fs::path(tts_dir()) / f, speak / f);
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(fs::path(test::data_dir()) / "audio" / "detokenizer_tiny" / f, speak / "audio_detokenizer" / f);
    const auto r = test::run_lfm("convert -q -m '" + speak.string() + "' -o '" + dir_->str() + "/speak-f32.gguf' --type f32");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(const std::string& name) { return (*dir_ / name).string(); }
  static inline test::TempDir* dir_ = nullptr;
};

TEST_F(SpeechOutGguf, TheVocoderFileHasLlamaCppsLayout) {
  const gguf::GgufFile f(path("vocoder-tts-q8_0.gguf"));
  ASSERT_TRUE(is_vocoder_gguf(f));
  EXPECT_EQ(f.find("depthformer_n_layer")->as_int("layers"), 2);
  EXPECT_EQ(f.find("depthformer_n_embd")->as_int("dim"), 32);
  const gguf::TensorInfo* qn = f.find_tensor("depthformer.layers.1.operator.attention.q_layernorm.weight");
  ASSERT_NE(qn, nullptr) << "bounded_attention is shortened to attention";
  EXPECT_EQ(qn->dtype, DType::F32);
  const gguf::TensorInfo* qkv = f.find_tensor("depthformer.layers.0.operator.qkv_proj.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->dtype, DType::Q8_0);
  EXPECT_EQ(qkv->ne, (std::vector<int64_t>{32, 32 + 2 * 2 * 8}));
  for (int c = 0; c < 8; ++c)
    EXPECT_NE(f.find_tensor("depth_embeddings." + std::to_string(c) + ".to_logits.weight"), nullptr)
        << "the runner needs every head, tied or not";
  EXPECT_NE(f.find_tensor("audio_embedding.embedding.weight"), nullptr);
  EXPECT_NE(f.find_tensor("depth_linear.bias"), nullptr);
  const SpeechOutConfig c = speech_out_config_from_vocoder(f, 64);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.ffn, 256);
  EXPECT_EQ(c.codebooks, 8);
  EXPECT_EQ(c.audio_vocab, 2049);
  EXPECT_EQ(c.audio_eos, 2048);
}

TEST_F(SpeechOutGguf, TheGgufFilesGiveTransformersGreedyTextAndCodes) {
  using json = nlohmann::json;
  const json g = test::read_json(tts_dir() + "/reference.json")["generate"]["seq_a"];
  const auto codes = g["audio_codes"].get<std::vector<std::vector<int32_t>>>();
  std::vector<std::vector<int32_t>> frames(codes[0].size());
  for (size_t f = 0; f < frames.size(); ++f)
    for (const auto& cb : codes) frames[f].push_back(cb[f]);
  ThreadPool pool(2);
  auto backend = make_cpu_backend(pool);
  for (const char* type : {"f32", "q8_0"}) {
    SCOPED_TRACE(type);
    LoadOptions lo;
    lo.mmproj = path(std::string("mmproj-tts-") + type + ".gguf");
    lo.vocoder = path(std::string("vocoder-tts-") + type + ".gguf");
    auto model = load_model(path(std::string("tts-") + type + ".gguf"), lo);
    ASSERT_NE(model->speech_out(), nullptr);
    EngineOptions eo;
    eo.state.ctx_size = 96;
    eo.state.type = DType::F32;
    Engine engine(*model, *backend, nullptr, eo);
    Request r;
    r.prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    r.max_tokens = g["max_new_tokens"].get<int64_t>();
    r.audio_out.mode = AudioOutMode::kSequential;
    r.audio_out.waveform = false;
    const auto got = test::collect(*engine.submit(r));
    ASSERT_TRUE(got.error.empty()) << got.error;
    if (std::string(type) == "f32") {
      EXPECT_EQ(got.tokens, g["sequences"].get<std::vector<int32_t>>());
      EXPECT_EQ(got.frames, frames);
    } else {  // Q8_0 rounds the weights: it still speaks, ending with the end-of-audio frame
      ASSERT_FALSE(got.frames.empty());
      EXPECT_EQ(got.tokens.front(), 128);
    }
  }
}

TEST_F(SpeechOutGguf, TheVocodersDetokenizerGivesTheFoldersWaveform) {
  using json = nlohmann::json;
  const json g = test::read_json(tts_dir() + "/reference.json")["generate"]["inter_b"];
  ThreadPool pool(2);
  auto backend = make_cpu_backend(pool);
  std::vector<std::vector<float>> waves;
  for (bool gguf : {false, true}) {
    LoadOptions lo;
    if (gguf) {
      lo.mmproj = path("mmproj-speak-f32.gguf");
      lo.vocoder = path("vocoder-speak-f32.gguf");
    }
    auto model = load_model(gguf ? path("speak-f32.gguf") : path("speak"), lo);
    ASSERT_NE(model->detokenizer(), nullptr);
    EngineOptions eo;
    eo.state.ctx_size = 128;
    eo.state.type = DType::F32;
    Engine engine(*model, *backend, nullptr, eo);
    Request r;
    r.prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    r.max_tokens = g["max_new_tokens"].get<int64_t>();
    r.audio_out.mode = AudioOutMode::kInterleaved;
    const auto got = test::collect(*engine.submit(r));
    ASSERT_TRUE(got.error.empty()) << got.error;
    ASSERT_EQ(got.audio.size(), got.frames.size() * 1920);
    waves.push_back(got.audio);
  }
  double worst = 0;
  for (size_t i = 0; i < waves[0].size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(waves[0][i] - waves[1][i])));
  EXPECT_LT(worst, 1e-6) << "the F32 vocoder GGUF's detokenizer is the folder's";
}

TEST_F(SpeechOutGguf, BadVocoderFilesAreRefusedByName) {
  LoadOptions lo;
  lo.vocoder = path("mmproj-tts-f32.gguf");  // a GGUF, but not a vocoder
  try {
    load_model(path("tts-f32.gguf"), lo);
    FAIL() << "loaded an mmproj as a vocoder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("depthformer_n_layer"), std::string::npos) << e.what();
  }
  lo.vocoder = path("vocoder-tts-f32.gguf");
  try {
    load_model(tts_dir(), lo);
    FAIL() << "a folder took a vocoder file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocoder"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lfm
