// LFM2-Audio speech output against transformers (tests/data/audio/lfm2audio_tts_tiny: a tiny random
// checkpoint whose greedy paths take every modality switch, and transformers' lfm2_audio outputs in
// float32; tests/data/audio/README.md): the depth transformer's logits and codes on given hidden
// rows; the engine's greedy text tokens, audio frames and modality order in sequential and
// interleaved generation, alone, all batched together, from the prefix cache and under preemption;
// a prompt holding an earlier spoken turn (its logits through Forward, its continuation through the
// engine); seeded audio sampling; the checks at submit.
// Tolerances (reference.json `tolerances`): logits 1e-4 absolute; tokens and codes exact (every
// recorded greedy decision wins by at least 1e-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/media_keys.h"
#include "kernels/cpu_backend.h"
#include "model/detokenizer.h"
#include "model/mimi.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/speech_out.h"
#include "model/state_plan.h"
#include "engine_test_util.h"
#include "model_test_util.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

using nlohmann::json;

std::string tts_dir() { return test::data_dir() + "/audio/lfm2audio_tts_tiny"; }

std::vector<float> read_f32(const std::string& rel) {
  const std::string bytes = test::read_file(tts_dir() + "/" + rel);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// A recorded generate() call: prompt, mode, budget, and what transformers made.
struct Scenario {
  std::string name;
  std::vector<int32_t> prompt;
  AudioOutMode mode = AudioOutMode::kSequential;
  int64_t max_new = 0;
  std::vector<int32_t> text;                 // sequences
  std::vector<std::vector<int32_t>> frames;  // [frames][codebooks]
  std::vector<int> modalities;
};

Scenario scenario(const std::string& name, const json& g) {
  Scenario s;
  s.name = name;
  s.prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  s.mode = parse_audio_out_mode(g["generation_mode"].get<std::string>());
  s.max_new = g["max_new_tokens"].get<int64_t>();
  s.text = g["sequences"].get<std::vector<int32_t>>();
  const auto codes = g["audio_codes"].get<std::vector<std::vector<int32_t>>>();  // [codebooks][frames]
  const size_t frames = codes.empty() ? 0 : codes[0].size();
  for (size_t f = 0; f < frames; ++f) {
    std::vector<int32_t> frame;
    for (const auto& cb : codes) frame.push_back(cb[f]);
    s.frames.push_back(frame);
  }
  s.modalities = g["modalities"].get<std::vector<int>>();
  return s;
}

class SpeechOutTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& backend = GetParam();
    if (backend == "fake-device" || backend == "fake-device-replay" || backend == "cuda" || backend == "cuda-emu") {
      std::string why;
      backend_ = test::make_named_backend(backend, pool_, load_, &why);
      if (!backend_) GTEST_SKIP() << why;
    } else {
      if (!isa_supported(parse_isa(backend))) GTEST_SKIP() << "CPU lacks " << backend;
      backend_ = make_backend_for(parse_isa(backend), pool_);
    }
    model_ = load_model(tts_dir(), load_);
    ASSERT_NE(model_->speech_out(), nullptr);
    ref_ = test::read_json(tts_dir() + "/reference.json");
    for (const char* name : {"seq_a", "seq_e", "inter_b", "inter_b2"})
      scenarios_.push_back(scenario(name, ref_["generate"][name]));
    const json& c = ref_["spoken_c"];
    spoken_ = scenario("spoken_c", c["continuation"]);
    spoken_frames_ = std::make_shared<AudioOutFrames>();
    spoken_frames_->position = c["first_audio_position"].get<int64_t>();
    const auto codes = c["prompt_audio_codes"].get<std::vector<std::vector<int32_t>>>();  // [codebooks][frames]
    spoken_frames_->frames = static_cast<int64_t>(codes[0].size());
    for (int64_t f = 0; f < spoken_frames_->frames; ++f)
      for (const auto& cb : codes) spoken_frames_->codes.push_back(cb[static_cast<size_t>(f)]);
    spoken_frames_->hash = 42;
  }

  // Engine logic that does not depend on the backend (preemption, sampling, checks) runs on the
  // machine's best CPU path only.
  bool best_cpu() const {
    for (const std::string isa : {"avx512", "avx2", "generic"})
      if (isa_supported(parse_isa(isa))) return GetParam() == isa;
    return false;
  }

  Request request(const Scenario& s) const {
    Request r;
    r.prompt = s.prompt;
    r.max_tokens = s.max_new;
    r.audio_out.mode = s.mode;
    r.audio_out.waveform = false;
    if (s.name == "spoken_c") r.audio_frames = {spoken_frames_};
    return r;
  }

  void expect_matches(const test::Result& r, const Scenario& s, const std::string& where) const {
    EXPECT_TRUE(r.error.empty()) << where << ": " << r.error;
    EXPECT_EQ(r.tokens, s.text) << where;
    EXPECT_EQ(r.frames, s.frames) << where;
    EXPECT_EQ(r.modalities, s.modalities) << where;
  }

  ThreadPool pool_{2};
  LoadOptions load_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  json ref_;
  std::vector<Scenario> scenarios_;
  Scenario spoken_;
  std::shared_ptr<AudioOutFrames> spoken_frames_;
};

EngineOptions engine_options(bool prefix_cache) {
  EngineOptions opt;
  opt.state.ctx_size = 128;
  opt.state.parallel = 6;
  opt.state.block_tokens = 8;
  opt.state.type = DType::F32;
  opt.state.prefix_cache = prefix_cache;
  return opt;
}

TEST_P(SpeechOutTest, DepthTransformerMatchesTransformers) {
  const json& d = ref_["depth"];
  const std::vector<float> hidden = read_f32(d["hidden"]["file"].get<std::string>());
  const std::vector<float> want = read_f32(d["greedy_incremental_logits"]["file"].get<std::string>());
  const auto greedy = d["greedy_codes"].get<std::vector<std::vector<int32_t>>>();
  const int64_t n = static_cast<int64_t>(greedy.size()), C = 8, V = 2049;
  DepthDecoder depth(*model_->speech_out(), *backend_);
  std::vector<int32_t> codes(static_cast<size_t>(n * C));
  double worst = 0;
  depth.run(hidden.data(), n, [&](int64_t row, int64_t cb, const float* logits) {
    const float* w = want.data() + (row * C + cb) * V;
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, static_cast<double>(std::abs(logits[v] - w[v])));
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  }, codes.data());
  EXPECT_LT(worst, 1e-4);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(std::vector<int32_t>(codes.begin() + i * C, codes.begin() + (i + 1) * C), greedy[static_cast<size_t>(i)])
        << "row " << i;
}

TEST_P(SpeechOutTest, GreedyMatchesTransformersAloneAndBatched) {
  for (const Scenario& s : scenarios_) {
    Engine engine(*model_, *backend_, nullptr, engine_options(false));
    expect_matches(test::collect(*engine.submit(request(s))), s, s.name + " alone");
  }
  // All at once, twice each, with the prefix cache: every request's output is its own.
  Engine engine(*model_, *backend_, nullptr, engine_options(true));
  std::vector<std::pair<const Scenario*, std::shared_ptr<RequestStream>>> streams;
  for (int round = 0; round < 2; ++round) {
    for (const Scenario& s : scenarios_) streams.emplace_back(&s, engine.submit(request(s)));
    streams.emplace_back(&spoken_, engine.submit(request(spoken_)));
  }
  for (auto& [s, stream] : streams) expect_matches(test::collect(*stream), *s, s->name + " batched");
  engine.wait_idle();
  EXPECT_GT(engine.stats().cache.prefix_hit_tokens, 0);
}

TEST_P(SpeechOutTest, ASpokenTurnInThePromptMatchesTransformers) {
  // Through Forward: every position's logits, the frames' positions taking their codes' embeddings.
  const json& c = ref_["spoken_c"];
  const std::vector<float> want = read_f32(c["prompt_logits"]["file"].get<std::string>());
  const ModelConfig& mc = model_->config();
  EngineOptions o = engine_options(false);
  auto cache = make_state_cache(*model_, o.state, *backend_);
  Forward fwd(*model_, *backend_, *cache);
  Sequence* seq = cache->open(o.state.ctx_size);
  const int64_t C = 8, D = mc.hidden_size;
  std::vector<float> rows(static_cast<size_t>(spoken_frames_->frames * D));
  std::vector<BatchItem::Embeddings> emb;
  for (int64_t f = 0; f < spoken_frames_->frames; ++f) {
    model_->speech_out()->frame_embedding(
        std::span<const int32_t>(spoken_frames_->codes).subspan(static_cast<size_t>(f * C), C), rows.data() + f * D);
    emb.push_back({spoken_frames_->position + f, 1, rows.data() + f * D});
  }
  BatchItem it;
  it.seq = seq;
  it.tokens = spoken_.prompt;
  it.all_logits = true;
  it.embeddings = emb;
  StepOutput out;
  fwd.step(std::span<const BatchItem>(&it, 1), out);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(out.logits[i] - want[i])));
  EXPECT_LT(worst, 1e-4);
  cache->close(seq);
  // Through the engine: the continuation, alone and again from the prefix cache.
  Engine engine(*model_, *backend_, nullptr, engine_options(true));
  expect_matches(test::collect(*engine.submit(request(spoken_))), spoken_, "spoken_c");
  const auto again = test::collect(*engine.submit(request(spoken_)));
  expect_matches(again, spoken_, "spoken_c from the prefix cache");
  EXPECT_GT(again.usage.cached_tokens, spoken_frames_->position);
}

TEST_P(SpeechOutTest, SpeakingRequestsSurvivePreemption) {
  if (!best_cpu()) GTEST_SKIP() << "engine logic: the best CPU path only";
  EngineOptions o = engine_options(true);
  int64_t most = 0;
  for (const Scenario& s : scenarios_)
    most = std::max<int64_t>(most, (static_cast<int64_t>(s.prompt.size()) + s.max_new + 7) / 8);
  o.state.ctx_size = most * 8;
  o.state.pad_rows = backend_->decode_step_max_pad();  // as the engine plans it
  o.state.memory_bytes = kv_memory_for_blocks(model_->config(), o.state, most + 2);
  Engine engine(*model_, *backend_, nullptr, o);
  std::vector<std::pair<const Scenario*, std::shared_ptr<RequestStream>>> streams;
  for (int round = 0; round < 2; ++round)
    for (const Scenario& s : scenarios_) streams.emplace_back(&s, engine.submit(request(s)));
  for (auto& [s, stream] : streams) expect_matches(test::collect(*stream), *s, s->name + " preempted");
  engine.wait_idle();
  EXPECT_GT(engine.stats().preemptions, 0) << "the pool was meant to be too small";
}

TEST_P(SpeechOutTest, SeededAudioSamplingIsReproducible) {
  if (!best_cpu()) GTEST_SKIP() << "engine logic: the best CPU path only";
  Engine engine(*model_, *backend_, nullptr, engine_options(false));
  Request r = request(scenarios_.front());
  r.audio_out.temperature = 1.0f;
  r.audio_out.top_k = 50;
  r.sampling.seed = 7;
  const auto a = test::collect(*engine.submit(r));
  const auto b = test::collect(*engine.submit(r));
  ASSERT_FALSE(a.frames.empty());
  EXPECT_EQ(a.frames, b.frames);
  EXPECT_EQ(a.tokens, b.tokens);
  r.sampling.seed = 8;
  EXPECT_NE(test::collect(*engine.submit(r)).frames, a.frames);
}

TEST_P(SpeechOutTest, AudioFirstIsAsIfTheModelHadChosenAudioStart) {
  if (!best_cpu()) GTEST_SKIP() << "engine logic: the best CPU path only";
  // seq_a's first output is <|audio_start|>: with it in the prompt, the rest follows unchanged.
  const Scenario& s = scenarios_.front();
  ASSERT_EQ(s.text.front(), 128);
  Engine engine(*model_, *backend_, nullptr, engine_options(false));
  Request r = request(s);
  r.prompt.push_back(128);
  r.max_tokens = s.max_new - 1;
  r.audio_out.audio_first = true;
  const auto got = test::collect(*engine.submit(r));
  EXPECT_EQ(got.frames, s.frames);
  EXPECT_EQ(got.tokens, std::vector<int32_t>(s.text.begin() + 1, s.text.end()));
  r.prompt.pop_back();  // not ending with <|audio_start|>: refused
  EXPECT_THROW(engine.submit(r), Error);
}

TEST_P(SpeechOutTest, SpeechRequestsAreCheckedAtSubmit) {
  if (!best_cpu()) GTEST_SKIP() << "engine logic: the best CPU path only";
  Engine engine(*model_, *backend_, nullptr, engine_options(true));
  Request r = request(spoken_);
  auto bad_code = std::make_shared<AudioOutFrames>(*spoken_frames_);
  bad_code->codes[3] = 2049;
  r.audio_frames = {bad_code};
  EXPECT_THROW(engine.submit(r), Error);
  auto short_codes = std::make_shared<AudioOutFrames>(*spoken_frames_);
  short_codes->codes.pop_back();
  r.audio_frames = {short_codes};
  EXPECT_THROW(engine.submit(r), Error);
  auto past_end = std::make_shared<AudioOutFrames>(*spoken_frames_);
  past_end->position = static_cast<int64_t>(spoken_.prompt.size()) - 2;
  r.audio_frames = {past_end};
  EXPECT_THROW(engine.submit(r), Error);
  r = request(spoken_);
  r.audio_out.temperature = -1.0f;
  EXPECT_THROW(engine.submit(r), Error);
  r = request(spoken_);
  r.drafter = Drafter::kNgram;
  EXPECT_THROW(engine.submit(r), Error);
  // Nothing was left behind: a good request still runs.
  expect_matches(test::collect(*engine.submit(request(spoken_))), spoken_, "after refusals");
}

std::vector<std::string> speech_backends() {
  std::vector<std::string> out;
  for (const auto& isa : test::all_isas()) out.push_back(isa);
  out.push_back("fake-device");
  out.push_back("fake-device-replay");
  out.push_back("cuda");
#if LFM_HAVE_CUDA_EMU
  out.push_back("cuda-emu");
#endif
  return out;
}

INSTANTIATE_TEST_SUITE_P(Speech, SpeechOutTest, ::testing::ValuesIn(speech_backends()), [](const auto& info) {
  std::string b = info.param;
  std::replace(b.begin(), b.end(), '-', '_');
  return b;
});

// The tiny speaking checkpoint with the tiny detokenizer as its audio_detokenizer/ folder.
std::string speaking_folder(const test::TempDir& dir) {
  namespace fs = std::filesystem;
  const fs::path out = fs::path(dir.str()) / "tts";
  fs::create_directories(out / "audio_detokenizer");
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(fs::path(tts_dir()) / f, out / f);
  const fs::path detok = fs::path(test::data_dir()) / "audio" / "detokenizer_tiny";
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(detok / f, out / "audio_detokenizer" / f);
  return out.string();
}

// The engine's streamed waveforms of three generations are the model's waveform decoder's
// decode() of each stretch of frames, bit for bit.
void expect_streamed_waveforms_are_whole_ones(const Model& model, Backend& backend) {
  const json ref = test::read_json(tts_dir() + "/reference.json");
  Engine engine(model, backend, nullptr, engine_options(true));
  std::vector<std::pair<Scenario, std::shared_ptr<RequestStream>>> streams;
  for (const char* name : {"seq_a", "inter_b", "inter_b2"}) {
    Scenario s = scenario(name, ref["generate"][name]);
    Request r;
    r.prompt = s.prompt;
    r.max_tokens = s.max_new;
    r.audio_out.mode = s.mode;
    auto stream = engine.submit(r);
    streams.emplace_back(std::move(s), std::move(stream));
  }
  for (auto& [s, stream] : streams) {
    const auto got = test::collect(*stream);
    ASSERT_TRUE(got.error.empty()) << s.name << ": " << got.error;
    EXPECT_EQ(got.frames, s.frames) << s.name;
    // The frames before each end-of-audio frame are one stretch of speech, decoded whole here.
    std::vector<float> want;
    std::vector<int32_t> stretch;
    auto flush = [&] {
      if (stretch.empty()) return;
      const std::vector<float> w = model.detokenizer()->decode(backend, stretch);
      want.insert(want.end(), w.begin(), w.end());
      stretch.clear();
    };
    for (const auto& f : got.frames) {
      if (f[0] == 2048) {
        flush();
        continue;
      }
      stretch.insert(stretch.end(), f.begin(), f.end());
    }
    flush();
    ASSERT_FALSE(want.empty()) << s.name;
    ASSERT_EQ(got.audio.size(), want.size()) << s.name;
    EXPECT_EQ(got.audio, want) << s.name << ": the streamed samples are not the whole waveform's bits";
    EXPECT_NEAR(got.usage.audio_seconds, static_cast<double>(want.size()) / 24000.0, 1e-9);
  }
}

TEST(SpeechOutWaveform, StreamedWaveformsAreTheDetokenizersWholeOnes) {
  test::TempDir dir("lfm_speech_wave");
  ThreadPool pool(2);
  auto backend = make_cpu_backend(pool);
  auto model = load_model(speaking_folder(dir));
  ASSERT_NE(dynamic_cast<const Detokenizer*>(model->detokenizer()), nullptr);
  expect_streamed_waveforms_are_whole_ones(*model, *backend);
}

// LFM2-Audio-1.5B's case: no audio_detokenizer/, Kyutai's Mimi decodes the frames (here the tiny
// transformers-layout Mimi of tests/data/audio/mimi_tiny given as LoadOptions::vocoder).
TEST(SpeechOutWaveform, StreamedMimiWaveformsAreItsWholeOnes) {
  namespace fs = std::filesystem;
  test::TempDir dir("lfm_speech_mimi");
  const fs::path out = fs::path(dir.str()) / "tts";
  fs::create_directories(out);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(fs::path(tts_dir()) / f, out / f);
  ThreadPool pool(2);
  auto backend = make_cpu_backend(pool);
  EXPECT_EQ(load_model(out.string())->detokenizer(), nullptr);  // codes only without one
  LoadOptions lo;
  lo.vocoder = test::data_dir() + "/audio/mimi_tiny";
  auto model = load_model(out.string(), lo);
  ASSERT_NE(dynamic_cast<const MimiDecoder*>(model->detokenizer()), nullptr);
  expect_streamed_waveforms_are_whole_ones(*model, *backend);
  // A vocoder that is no Mimi is refused for a checkpoint folder, naming it.
  lo.vocoder = (out / "config.json").string();
  try {
    load_model(out.string(), lo);
    ADD_FAILURE() << "a config.json was taken as a Mimi";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is neither for the checkpoint folder"), std::string::npos) << e.what();
  }
}

TEST(SpeechOut, ModelsThatCannotSpeakRefuseSpeechOutput) {
  ThreadPool pool(2);
  auto backend = make_cpu_backend(pool);
  test::TempDir dir("lfm_speech_text");
  test::write_text_model(dir.str());
  auto model = load_model(dir.str());
  EXPECT_EQ(model->speech_out(), nullptr);
  EngineOptions o;
  o.state.ctx_size = 64;
  Engine engine(*model, *backend, nullptr, o);
  Request r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 2;
  r.audio_out.mode = AudioOutMode::kSequential;
  r.audio_out.waveform = false;
  EXPECT_THROW(engine.submit(r), Error);
}

}  // namespace
}  // namespace lfm
