// LFM2-Audio through the engine, against transformers (tests/data/audio: two tiny random
// checkpoints and transformers' lfm2_audio outputs in float32): greedy tokens with the clips'
// encoder rows in place of the audio tokens, alone, batched with text requests, from the prefix
// cache, under preemption, and with encoding spread over a decoding stream's steps; the clips as
// the engine's own front end makes them from samples give the same tokens.
// Tolerance: greedy tokens identical (every recorded step wins its argmax by at least 5e-3; the
// front end is within ~1e-3 of transformers' features, tests/audio_log_mel_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "engine/audio_prompt.h"
#include "engine/engine.h"
#include "kernels/cpu_backend.h"
#include "model/audio_model.h"
#include "model/model.h"
#include "engine_test_util.h"
#include "model_test_util.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

using nlohmann::json;

std::string audio_dir(const std::string& name = "") {
  return test::data_dir() + "/audio" + (name.empty() ? "" : "/" + name);
}

std::vector<float> read_f32(const std::string& path) {
  const std::string bytes = test::read_file(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// One recorded prompt (reference.json `prompt` / `pair_prompt`): ids, greedy tokens, and its clips
// as transformers' feature extractor gave them, placed at the runs of audio tokens.
struct AudioCase {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;
  std::vector<std::string> clips;
  std::vector<std::shared_ptr<const AudioInput>> inputs;
};

class AudioEngineTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    const auto& [fixture, backend] = GetParam();
    if (backend == "fake-device" || backend == "fake-device-replay" || backend == "cuda" || backend == "cuda-emu") {
      std::string why;
      backend_ = test::make_named_backend(backend, pool_, load_, &why);
      if (!backend_) GTEST_SKIP() << why;
    } else {
      if (!isa_supported(parse_isa(backend))) GTEST_SKIP() << "CPU lacks " << backend;
      backend_ = make_backend_for(parse_isa(backend), pool_);
    }
    model_ = load_model(audio_dir(fixture), load_);
    ASSERT_NE(model_->audio(), nullptr);
    const json ref = test::read_json(audio_dir(fixture) + "/reference.json");
    frontend_ = test::read_json(audio_dir("frontend/reference.json"));
    for (const char* key : {"prompt", "pair_prompt"}) {
      const json& p = ref[key];
      AudioCase c;
      c.name = key;
      c.ids = p["input_ids"].get<std::vector<int32_t>>();
      for (const json& g : p["greedy"]) c.greedy.push_back(g["token"].get<int32_t>());
      c.clips = p.contains("clips") ? p["clips"].get<std::vector<std::string>>()
                                    : std::vector<std::string>{p["clip"].get<std::string>()};
      c.inputs = fixture_inputs(c.ids, c.clips);
      cases_.push_back(std::move(c));
    }
  }

  // The clips' features as transformers computed them, placed at the runs of audio tokens.
  std::vector<std::shared_ptr<const AudioInput>> fixture_inputs(const std::vector<int32_t>& ids,
                                                                const std::vector<std::string>& clips) const {
    const int32_t audio_token = model_->audio()->config().audio_token_id;
    std::vector<std::shared_ptr<const AudioInput>> out;
    size_t next = 0;
    for (const std::string& name : clips) {
      auto in = std::make_shared<AudioInput>();
      in->features = read_f32(audio_dir("frontend/features/" + name + ".f32"));
      in->mel_bins = 128;
      in->frames = static_cast<int64_t>(in->features.size()) / in->mel_bins;
      in->tokens = model_->audio()->tokens_for(in->frames);
      while (next < ids.size() && ids[next] != audio_token) ++next;
      in->position = static_cast<int64_t>(next);
      next += static_cast<size_t>(in->tokens);
      in->hash = std::hash<std::string>()(name);
      out.push_back(std::move(in));
    }
    return out;
  }

  std::vector<float> samples(const std::string& clip) const { return read_f32(audio_dir("frontend/clips/" + clip + ".f32")); }

  ThreadPool pool_{2};
  LoadOptions load_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  json frontend_;
  std::vector<AudioCase> cases_;
};

EngineOptions engine_options(bool prefix_cache) {
  EngineOptions opt;
  opt.state.ctx_size = 256;
  opt.state.parallel = 4;
  opt.state.block_tokens = 8;
  opt.state.type = DType::F32;
  opt.state.prefix_cache = prefix_cache;
  return opt;
}

Request greedy_request(const AudioCase& c, std::vector<std::shared_ptr<const AudioInput>> audios) {
  Request r;
  r.prompt = c.ids;
  r.max_tokens = static_cast<int64_t>(c.greedy.size());
  r.ignore_eos = true;
  r.audios = std::move(audios);
  return r;
}

TEST_P(AudioEngineTest, GreedyMatchesTransformersAloneBatchedAndFromThePrefixCache) {
  Engine engine(*model_, *backend_, nullptr, engine_options(true));
  for (const AudioCase& c : cases_) {
    SCOPED_TRACE(c.name);
    const auto first = test::collect(*engine.submit(greedy_request(c, c.inputs)));
    EXPECT_EQ(first.tokens, c.greedy) << first.error;
    EXPECT_EQ(first.usage.audio_clips, static_cast<int64_t>(c.clips.size()));
    // Again with two text requests beside it: the same tokens, the clips' blocks from the cache.
    Request text1, text2;
    text1.prompt = {1, 6, 200, 201, 10, 210, 211};
    text2.prompt = std::vector<int32_t>(40, 220);
    text1.max_tokens = text2.max_tokens = 10;
    text1.ignore_eos = text2.ignore_eos = true;
    const auto text1_alone = test::collect(*Engine(*model_, *backend_, nullptr, engine_options(false)).submit(text1));
    auto s1 = engine.submit(text1);
    auto again = engine.submit(greedy_request(c, c.inputs));
    auto s2 = engine.submit(text2);
    const auto second = test::collect(*again);
    EXPECT_EQ(test::collect(*s1).tokens, text1_alone.tokens);
    test::collect(*s2);
    EXPECT_EQ(second.tokens, c.greedy);
    EXPECT_GE(second.usage.cached_tokens, c.inputs.back()->position + c.inputs.back()->tokens - 8)
        << "the repeated clip missed the prefix cache";
    EXPECT_EQ(second.usage.audio_clips, 0) << "encoded again although its rows were cached";
  }
}

TEST_P(AudioEngineTest, TheEnginesFrontEndGivesTheSameTokensFromSamples) {
  Engine engine(*model_, *backend_, nullptr, engine_options(false));
  const AudioPromptSetup setup = audio_prompt_setup(*model_);
  for (const AudioCase& c : cases_) {
    SCOPED_TRACE(c.name);
    // The prompt with one placeholder per clip, laid out by expand_audio from the clips' samples.
    std::vector<int32_t> collapsed;
    for (size_t i = 0; i < c.ids.size(); ++i)
      if (c.ids[i] != setup.audio_token_id || i == 0 || c.ids[i - 1] != setup.audio_token_id) collapsed.push_back(c.ids[i]);
    std::vector<std::vector<float>> clips;
    for (const std::string& name : c.clips) clips.push_back(samples(name));
    const AudioPrompt laid = expand_audio(collapsed, clips, setup);
    ASSERT_EQ(laid.ids, c.ids);
    ASSERT_EQ(laid.audios.size(), c.clips.size());
    for (size_t i = 0; i < c.clips.size(); ++i) {
      EXPECT_EQ(laid.audios[i]->position, c.inputs[i]->position);
      EXPECT_EQ(laid.audios[i]->tokens, c.inputs[i]->tokens);
    }
    const auto got = test::collect(*engine.submit(greedy_request(c, laid.audios)));
    EXPECT_EQ(got.tokens, c.greedy) << got.error;
  }
}

// While another request decodes, a clip is encoded in stages over several steps, so that stream
// goes on; with nothing decoding it is encoded at once. The tokens of both are as alone.
TEST_P(AudioEngineTest, EncodingYieldsToADecodingStream) {
  EngineOptions o = engine_options(false);
  o.encode_slice_ms = 1e-6;
  Request text;
  text.prompt = {1, 6, 200, 201, 202};
  text.max_tokens = 120;
  text.ignore_eos = true;
  const auto text_alone = test::collect(*Engine(*model_, *backend_, nullptr, o).submit(text));
  const AudioCase& c = cases_.front();
  Engine lone(*model_, *backend_, nullptr, o);
  const auto alone = test::collect(*lone.submit(greedy_request(c, c.inputs)));
  EXPECT_EQ(alone.tokens, c.greedy);
  EXPECT_EQ(alone.usage.encode_steps, 1) << "nothing decoded beside it: the clip is encoded at once";
  Engine engine(*model_, *backend_, nullptr, o);
  auto stream = engine.submit(text);
  Event first;
  ASSERT_TRUE(stream->next(first));
  const auto beside = test::collect(*engine.submit(greedy_request(c, c.inputs)));
  stream->cancel();
  auto rest = test::collect(*stream);
  rest.tokens.insert(rest.tokens.begin(), first.token);
  EXPECT_EQ(beside.tokens, c.greedy);
  ASSERT_LE(rest.tokens.size(), text_alone.tokens.size());
  EXPECT_TRUE(std::equal(rest.tokens.begin(), rest.tokens.end(), text_alone.tokens.begin()));
  EXPECT_GT(beside.usage.encode_steps, 1) << "the encoding was not spread over the stream's steps";
}

TEST_P(AudioEngineTest, ADifferentClipOfTheSameLengthNeverHitsTheCachedOne) {
  Engine engine(*model_, *backend_, nullptr, engine_options(true));
  const AudioCase& c = cases_.front();
  test::collect(*engine.submit(greedy_request(c, c.inputs)));
  auto other = std::make_shared<AudioInput>(*c.inputs.front());
  for (float& v : other->features) v = -v;
  other->hash ^= 0x5555;
  const auto warm = test::collect(*engine.submit(greedy_request(c, {other})));
  EXPECT_LE(warm.usage.cached_tokens, other->position);
  Engine cold(*model_, *backend_, nullptr, engine_options(false));
  EXPECT_EQ(warm.tokens, test::collect(*cold.submit(greedy_request(c, {other}))).tokens);
}

// Every case at once, three times over, each generating 24 tokens, in a pool too small for them:
// requests are preempted and resumed (their clips' rows kept, their tokens recomputed) and still
// give the tokens they give alone (the first four transformers').
TEST_P(AudioEngineTest, AudioRequestsSurvivePreemption) {
  constexpr int64_t kTokens = 24;
  std::vector<std::vector<int32_t>> alone;
  {
    Engine solo(*model_, *backend_, nullptr, engine_options(false));
    for (const AudioCase& c : cases_) {
      Request r = greedy_request(c, c.inputs);
      r.max_tokens = kTokens;
      alone.push_back(test::collect(*solo.submit(r)).tokens);
      ASSERT_EQ(std::vector<int32_t>(alone.back().begin(), alone.back().begin() + 4), c.greedy);
    }
  }
  EngineOptions o = engine_options(true);
  o.state.parallel = 6;
  int64_t most = 0;
  for (const AudioCase& c : cases_) most = std::max<int64_t>(most, (static_cast<int64_t>(c.ids.size()) + kTokens + 7) / 8);
  o.state.ctx_size = most * 8;
  o.state.pad_rows = backend_->decode_step_max_pad();  // as the engine plans it
  o.state.memory_bytes = kv_memory_for_blocks(model_->config(), o.state, most + 1);
  Engine engine(*model_, *backend_, nullptr, o);
  std::vector<std::pair<size_t, std::shared_ptr<RequestStream>>> streams;
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < cases_.size(); ++i) {
      Request r = greedy_request(cases_[i], cases_[i].inputs);
      r.max_tokens = kTokens;
      streams.emplace_back(i, engine.submit(r));
    }
  for (auto& [i, stream] : streams) {
    const auto r = test::collect(*stream);
    EXPECT_EQ(r.tokens, alone[i]) << cases_[i].name << ": " << r.error;
  }
  engine.wait_idle();
  EXPECT_GT(engine.stats().preemptions, 0) << "the pool was meant to be too small";
}

TEST_P(AudioEngineTest, AudioRequestsAreCheckedAtSubmit) {
  Engine engine(*model_, *backend_, nullptr, engine_options(true));
  const AudioCase& c = cases_.front();
  auto shifted = std::make_shared<AudioInput>(*c.inputs.front());
  shifted->position -= 1;  // onto a text token
  EXPECT_THROW(engine.submit(greedy_request(c, {shifted})), Error);
  auto truncated = std::make_shared<AudioInput>(*c.inputs.front());
  truncated->features.pop_back();
  EXPECT_THROW(engine.submit(greedy_request(c, {truncated})), Error);
  auto wrong_count = std::make_shared<AudioInput>(*c.inputs.front());
  wrong_count->tokens += 1;
  EXPECT_THROW(engine.submit(greedy_request(c, {wrong_count})), Error);
  // Nothing was left behind: a good request still runs.
  EXPECT_EQ(test::collect(*engine.submit(greedy_request(c, c.inputs))).tokens, c.greedy);
}

std::vector<std::string> audio_backends() {
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

INSTANTIATE_TEST_SUITE_P(Audio, AudioEngineTest,
                         ::testing::Combine(::testing::Values("lfm2audio_tiny_a", "lfm2audio_tiny_b"),
                                            ::testing::ValuesIn(audio_backends())),
                         [](const auto& info) { return test::fixture_backend_name(info, 16); });

TEST(AudioEngine, ModelsWithoutASpeechEncoderRefuseAudio) {
  ThreadPool pool(2);
  auto backend = make_cpu_backend(pool);
  test::TempDir dir("lfm_audio_text");
  test::write_text_model(dir.str());
  auto model = load_model(dir.str());
  EXPECT_EQ(model->audio(), nullptr);
  EXPECT_THROW(audio_prompt_setup(*model), Error);
  Engine engine(*model, *backend, nullptr, engine_options(false));
  auto clip = std::make_shared<AudioInput>();
  clip->frames = 9;
  clip->mel_bins = 128;
  clip->features.assign(9 * 128, 0.0f);
  clip->tokens = 2;
  clip->position = 1;
  Request r;
  r.prompt = {1, 133, 133, 7};
  r.max_tokens = 1;
  r.audios = {clip};
  try {
    engine.submit(r);
    ADD_FAILURE() << "a text model took an audio clip";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no speech encoder"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lfm
