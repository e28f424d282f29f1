// The LFM2-Audio speech encoder and adapter against transformers (tests/data/audio: tiny random
// checkpoints, transformers 5.2.0's Lfm2AudioForConditionalGeneration in float32; README.md there):
// per clip the encoder and adapter outputs from the fixture's input features, several clips in one
// call, the staged encoding, the backbone's logits with the adapter rows in place of the audio
// placeholders and its greedy tokens; the original checkpoint layout and a folded BatchNorm
// (the config: tests/audio_config_test.cpp).
// Tolerances (reference.json "tolerances"): activations and logits 1e-4 absolute; greedy tokens
// and argmax exact (every recorded one wins by at least 5e-3).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <list>

#include "core/thread_pool.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "kernels/cpu_backend.h"
#include "model/audio_model.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state_plan.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

using nlohmann::json;
constexpr double kTol = 1e-4;

std::string audio_dir(const std::string& name) { return test::data_dir() + "/audio/" + name; }
nlohmann::json fixture_config_of(const std::string& folder) { return test::read_json(folder + "/config.json"); }

std::vector<float> read_f32(const std::string& path, size_t expect) {
  const std::string bytes = test::read_file(path);
  if (bytes.size() != expect * sizeof(float))
    throw Error("test: '" + path + "' has " + std::to_string(bytes.size()) + " bytes, expected " +
                std::to_string(expect * sizeof(float)));
  std::vector<float> out(expect);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// A fixture file described in reference.json ({"file", "shape"}), relative to the fixture folder.
std::vector<float> read_output(const std::string& fixture, const json& desc) {
  size_t n = 1;
  for (const json& d : desc["shape"]) n *= d.get<size_t>();
  return read_f32(audio_dir(fixture) + "/" + desc["file"].get<std::string>(), n);
}

void expect_close(const float* got, const std::vector<float>& want, double tol, const std::string& what) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= worst)) worst = std::fabs(got[i] - want[i]), at = i;
  EXPECT_LE(worst, tol) << what << ": worst difference at element " << at << " (" << got[at] << " vs " << want[at]
                        << ")";
}

struct Clip {
  std::string name;
  int64_t frames = 0, tokens = 0;
  std::vector<float> features, encoder, adapter;
};

class AudioEncoderFixtureTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    const auto& [fixture, backend] = GetParam();
    fixture_ = fixture;
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
    ref_ = test::read_json(audio_dir(fixture) + "/reference.json");
    const int64_t mels = model_->audio()->config().num_mel_bins;
    for (const json& c : ref_["clips"]) {
      Clip clip;
      clip.name = c["name"];
      clip.frames = c["num_frames_T"];
      clip.tokens = c["audio_tokens_N"];
      clip.features = read_f32(audio_dir(fixture) + "/" + c["input_features"].get<std::string>(),
                               static_cast<size_t>(clip.frames * mels));
      clip.encoder = read_output(fixture, c["encoder_output"]);
      clip.adapter = read_output(fixture, c["adapter_output"]);
      clips_.push_back(std::move(clip));
    }
  }
  const Clip& clip(const std::string& name) const {
    for (const Clip& c : clips_)
      if (c.name == name) return c;
    throw Error("test: no clip " + name);
  }
  static AudioClip input(const Clip& c) { return {c.frames, c.features}; }

  // The prompt's logits at every position with the clips' adapter rows in place of its audio
  // placeholders, then `extra` greedy tokens (each fed back); returns the greedy tokens.
  std::vector<int32_t> run_prompt(const json& prompt, const std::vector<std::vector<float>>& rows, int extra,
                                  std::vector<float>& logits) {
    const std::vector<int32_t> ids = prompt["input_ids"].get<std::vector<int32_t>>();
    const std::vector<int64_t> positions = prompt["audio_positions"].get<std::vector<int64_t>>();
    // Runs of consecutive placeholders, one per clip in order.
    std::vector<BatchItem::Embeddings> embeds;
    size_t next = 0;
    for (size_t c = 0; c < rows.size(); ++c) {
      const int64_t n = static_cast<int64_t>(rows[c].size()) / model_->config().hidden_size;
      EXPECT_LE(next + static_cast<size_t>(n), positions.size());
      embeds.push_back({positions[next], n, rows[c].data()});
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(positions[next + static_cast<size_t>(i)], positions[next] + i);
      next += static_cast<size_t>(n);
    }
    EXPECT_EQ(next, positions.size());
    StatePlanOptions plan;
    plan.ctx_size = 128;
    plan.block_tokens = 16;
    plan.type = DType::F32;
    auto cache = make_state_cache(*model_, plan, *backend_);
    Forward fwd(*model_, *backend_, *cache);
    Sequence* seq = cache->open(plan.ctx_size);
    BatchItem item{seq, ids, /*all_logits=*/true};
    item.embeddings = embeds;
    StepOutput out;
    fwd.step(std::span(&item, 1), out);
    logits = out.logits;
    const int64_t V = model_->config().vocab_size;
    std::vector<int32_t> greedy;
    const float* last = out.logits.data() + (static_cast<int64_t>(ids.size()) - 1) * V;
    for (int i = 0; i < extra; ++i) {
      const int32_t tok = static_cast<int32_t>(std::max_element(last, last + V) - last);
      greedy.push_back(tok);
      if (i + 1 == extra) break;
      const std::vector<int32_t> one = {tok};
      BatchItem step{seq, one};
      fwd.step(std::span(&step, 1), out);
      last = out.logits.data();
    }
    cache->close(seq);
    return greedy;
  }

  ThreadPool pool_{2};
  LoadOptions load_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::string fixture_;
  json ref_;
  std::vector<Clip> clips_;
};

TEST_P(AudioEncoderFixtureTest, EncoderAndAdapterMatchTransformersPerClip) {
  const AudioModel& am = *model_->audio();
  const int64_t d = am.config().hidden_size, D = am.config().text_hidden_size;
  for (const Clip& c : clips_) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(am.tokens_for(c.frames), c.tokens);
    std::vector<float> encoder;
    const AudioClip in[] = {input(c)};
    const auto out =
        am.encode(*backend_, in, [&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
          if (name == "audio.encoder") {
            EXPECT_EQ(rows, c.tokens);
            EXPECT_EQ(cols, d);
            encoder.assign(data, data + rows * cols);
          }
        });
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(encoder.size(), c.encoder.size());
    expect_close(encoder.data(), c.encoder, kTol, c.name + " encoder");
    ASSERT_EQ(static_cast<int64_t>(out[0].size()), c.tokens * D);
    expect_close(out[0].data(), c.adapter, kTol, c.name + " adapter");
  }
}

// Every clip in one call gives each clip what it gets alone: the same bits on a backend whose rows
// are independent of their batch (every CPU backend), within 1e-5 elsewhere; and the staged
// encoding is encode().
TEST_P(AudioEncoderFixtureTest, ClipsTogetherAndStagedAreTheClipsAlone) {
  const AudioModel& am = *model_->audio();
  std::vector<AudioClip> all;
  std::vector<std::vector<float>> alone;
  for (const Clip& c : clips_) {
    all.push_back(input(c));
    const AudioClip in[] = {input(c)};
    alone.push_back(am.encode(*backend_, in)[0]);
  }
  const auto together = am.encode(*backend_, all);
  ASSERT_EQ(together.size(), clips_.size());
  for (size_t i = 0; i < clips_.size(); ++i) {
    ASSERT_EQ(together[i].size(), alone[i].size()) << clips_[i].name;
    if (backend_->bitwise_batch_invariant())
      EXPECT_EQ(together[i], alone[i]) << clips_[i].name;
    else
      expect_close(together[i].data(), alone[i], 1e-5, clips_[i].name + " together vs alone");
    expect_close(together[i].data(), clips_[i].adapter, kTol, clips_[i].name + " together");
  }
  AudioEncoding staged(am, *backend_, all);
  EXPECT_EQ(staged.stages(), am.config().n_layers + 2);
  while (!staged.done()) {
    const int64_t before = staged.stages_done();
    staged.run_stage();
    EXPECT_EQ(staged.stages_done(), before + 1);
  }
  EXPECT_EQ(staged.take(), together);
}

TEST_P(AudioEncoderFixtureTest, PromptLogitsAndGreedyTokensMatchTransformers) {
  const AudioModel& am = *model_->audio();
  for (const char* key : {"prompt", "pair_prompt"}) {
    SCOPED_TRACE(key);
    const json& p = ref_[key];
    std::vector<std::string> names;
    if (p.contains("clip")) names.push_back(p["clip"]);
    for (const json& n : p.value("clips", json::array())) names.push_back(n);
    std::vector<AudioClip> in;
    for (const std::string& n : names) in.push_back(input(clip(n)));
    const auto rows = am.encode(*backend_, in);  // the pair in one call, as transformers ran it
    std::vector<float> logits;
    std::vector<int32_t> want_greedy;
    for (const json& g : p["greedy"]) want_greedy.push_back(g["token"]);
    const auto greedy = run_prompt(p, rows, static_cast<int>(want_greedy.size()), logits);
    const auto want = read_output(fixture_, p["logits"]);
    ASSERT_EQ(logits.size(), want.size());
    expect_close(logits.data(), want, kTol, std::string(key) + " logits");
    const int64_t V = model_->config().vocab_size;
    const auto argmax = p["argmax"].get<std::vector<int32_t>>();
    for (size_t r = 0; r < argmax.size(); ++r) {
      if (!p["argmax_margin_ok"][r].get<bool>()) continue;
      const float* row = logits.data() + static_cast<int64_t>(r) * V;
      EXPECT_EQ(std::max_element(row, row + V) - row, argmax[r]) << "position " << r;
    }
    EXPECT_EQ(greedy, want_greedy);
  }
}

// Clips past the encoder's positions are refused before any work, naming the limit.
TEST_P(AudioEncoderFixtureTest, ClipsPastThePositionsAreRefused) {
  auto ckpt = open_audio_checkpoint(audio_dir(fixture_));
  ASSERT_TRUE(ckpt.has_value());
  AudioConfig cfg = ckpt->config;
  cfg.max_position_embeddings = 12;
  const AudioModel small(cfg, ckpt->source, load_.backend);
  const Clip& c = clip("sweep_1p0s");  // 13 rows
  const AudioClip in[] = {input(c)};
  try {
    small.encode(*backend_, in);
    ADD_FAILURE() << "a clip of 13 rows passed a limit of 12";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the encoder's 12 positions"), std::string::npos) << e.what();
  }
  const AudioClip absurd[] = {{int64_t(1) << 60, c.features}};  // refused by its length, before any size arithmetic
  EXPECT_THROW(model_->audio()->encode(*backend_, absurd), Error);
  const AudioClip none[] = {{0, {}}};
  EXPECT_THROW(model_->audio()->encode(*backend_, none), Error);
  const std::vector<float> short_features(static_cast<size_t>(c.features.size() - 1));
  const AudioClip bad[] = {{c.frames, short_features}};
  EXPECT_THROW(model_->audio()->encode(*backend_, bad), Error);
}

// NeMo's xscaling (Parakeet's scale_input): the subsampling's output times √d, before the blocks.
TEST_P(AudioEncoderFixtureTest, ScaleInputMultipliesTheSubsamplingBySqrtD) {
  auto ckpt = open_audio_checkpoint(audio_dir(fixture_));
  ASSERT_TRUE(ckpt.has_value());
  AudioConfig cfg = ckpt->config;
  ASSERT_FALSE(cfg.scale_input);
  cfg.scale_input = true;
  const AudioModel scaled(cfg, ckpt->source, load_.backend);
  const Clip& c = clip("tone_1280");
  const AudioClip in[] = {input(c)};
  auto subsampling = [&](const AudioModel& m) {
    std::vector<float> out;
    m.encode(*backend_, in, [&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
      if (name == "audio.subsampling") out.assign(data, data + rows * cols);
    });
    return out;
  };
  std::vector<float> want = subsampling(*model_->audio());
  const float root = std::sqrt(static_cast<float>(cfg.hidden_size));
  for (float& v : want) v *= root;
  EXPECT_EQ(subsampling(scaled), want);
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

INSTANTIATE_TEST_SUITE_P(Audio, AudioEncoderFixtureTest,
                         ::testing::Combine(::testing::Values("lfm2audio_tiny_a", "lfm2audio_tiny_b"),
                                            ::testing::ValuesIn(audio_backends())),
                         [](const auto& info) { return test::fixture_backend_name(info, 16); });

// ---- checkpoint layouts, on the reference backend ----

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  if (const size_t at = s.find(from); at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// The original (liquid-audio / NeMo) name of a native checkpoint tensor (research notes §1.3).
std::string original_name(const std::string& native) {
  std::string n = native.compare(0, 6, "model.") == 0 ? native.substr(6) : native;
  if (n.compare(0, 10, "conformer.") != 0 && n.compare(0, 14, "audio_adapter_") != 0) return n;  // lfm.…, depth…
  for (const auto& [from, to] :
       {std::pair<const char*, const char*>{"conformer.subsampling.layers.", "conformer.pre_encode.conv."},
        {"conformer.subsampling.linear.", "conformer.pre_encode.out."},
        {".self_attn.q_proj.", ".self_attn.linear_q."},
        {".self_attn.k_proj.", ".self_attn.linear_k."},
        {".self_attn.v_proj.", ".self_attn.linear_v."},
        {".self_attn.o_proj.", ".self_attn.linear_out."},
        {".self_attn.relative_k_proj.", ".self_attn.linear_pos."},
        {".self_attn.bias_u", ".self_attn.pos_bias_u"},
        {".self_attn.bias_v", ".self_attn.pos_bias_v"},
        {".conv.norm.", ".conv.batch_norm."},
        {"audio_adapter_norm.", "audio_adapter.model.0."},
        {"audio_adapter_linear_1.", "audio_adapter.model.1."},
        {"audio_adapter_linear_2.", "audio_adapter.model.3."}})
    n = replaced(n, from, to);
  return n;
}

// Every clip's adapter rows from the model in `folder` (reference backend).
std::vector<std::vector<float>> run_folder(const std::string& folder,
                                           const std::vector<std::pair<int64_t, std::vector<float>>>& clips) {
  ThreadPool pool(2);
  auto be = make_backend_for(Isa::kGeneric, pool);
  auto model = load_model(folder);
  std::vector<std::vector<float>> rows;
  for (const auto& [frames, features] : clips) {
    const AudioClip in[] = {{frames, features}};
    rows.push_back(model->audio()->encode(*be, in)[0]);
  }
  return rows;
}

// The original checkpoint layout (config.json with NeMo's encoder keys and no model_type,
// tensors "conformer.pre_encode.…", "audio_adapter.model.{0,1,3}.…", "lfm.…") loads as the same
// model as the native one: the same bits.
TEST(AudioCheckpoint, TheOriginalLayoutIsTheNativeModel) {
  const std::string native = audio_dir("lfm2audio_tiny_a");
  const test::TempDir dir("audio_original");
  json cfg = fixture_config_of(native);
  cfg.erase("model_type");
  cfg["encoder"] = json{{"feat_in", 128},
                        {"n_layers", 2},
                        {"d_model", 32},
                        {"subsampling", "dw_striding"},
                        {"subsampling_factor", 8},
                        {"subsampling_conv_channels", 4},
                        {"ff_expansion_factor", 2},
                        {"self_attention_model", "rel_pos"},
                        {"n_heads", 4},
                        {"xscaling", false},
                        {"untie_biases", true},
                        {"pos_emb_max_len", 5000},
                        {"conv_kernel_size", 9},
                        {"conv_norm_type", "batch_norm"}};
  dir.write("config.json", cfg.dump(2));
  const SafetensorsCheckpoint src(native);
  std::vector<SafetensorsWriter::Entry> entries;
  for (const std::string& n : src.names())
    entries.push_back({original_name(n), src.find(n)->dtype, src.find(n)->shape});
  SafetensorsWriter w((dir / "model.safetensors").string(), entries);
  for (const std::string& n : src.names()) w.write(original_name(n), src.find(n)->data, src.find(n)->nbytes);
  w.finish();

  const json ref = test::read_json(native + "/reference.json");
  std::vector<std::pair<int64_t, std::vector<float>>> clips;
  for (const json& c : ref["clips"]) {
    const int64_t frames = c["num_frames_T"];
    clips.push_back({frames, read_f32(native + "/" + c["input_features"].get<std::string>(), frames * 128)});
  }
  EXPECT_EQ(run_folder(dir.str(), clips), run_folder(native, clips));
  auto ckpt = open_audio_checkpoint(dir.str());
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_EQ(ckpt->config.hidden_size, 32);
  EXPECT_TRUE(ckpt->source->find("conformer.layers.1.self_attn.relative_k_proj.weight"));
  EXPECT_TRUE(ckpt->source->find("audio_adapter_linear_2.bias"));
  EXPECT_FALSE(open_audio_checkpoint(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32")).has_value());
}

// A source in memory: the tensors given, each owning its floats.
class FloatSource : public MapTensorSource {
 public:
  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    data_.push_back(std::move(values));
    TensorView v;
    v.dtype = DType::F32;
    v.shape = std::move(shape);
    v.data = data_.back().data();
    v.nbytes = data_.back().size() * sizeof(float);
    tensors_[name] = v;
  }
  void set_origin(std::string o) { origin_ = std::move(o); }

 private:
  std::list<std::vector<float>> data_;
};

// llama.cpp stores each conv module's BatchNorm folded (weight a = γ/√(var + eps), bias
// β − mean·a, no running statistics): the same rows within float rounding. A tensor the
// encoder does not know, or one missing, is an error naming it.
TEST(AudioCheckpoint, AFoldedBatchNormGivesTheSameRows) {
  const std::string native = audio_dir("lfm2audio_tiny_a");
  auto ckpt = open_audio_checkpoint(native);
  ASSERT_TRUE(ckpt.has_value());
  auto floats = [&](const std::string& n) {
    const TensorView* t = ckpt->source->find(n);
    const float* p = static_cast<const float*>(t->data);
    return std::vector<float>(p, p + t->numel());
  };
  auto folded = std::make_shared<FloatSource>();
  folded->set_origin("folded");
  for (const std::string& n : ckpt->source->names()) {
    if (n.find("conv.norm.") != std::string::npos) continue;
    folded->add(n, ckpt->source->find(n)->shape, floats(n));
  }
  for (int i = 0; i < 2; ++i) {
    const std::string p = "conformer.layers." + std::to_string(i) + ".conv.norm.";
    const auto g = floats(p + "weight"), b = floats(p + "bias"), m = floats(p + "running_mean"),
               v = floats(p + "running_var");
    std::vector<float> a(g.size()), sh(g.size());
    for (size_t c = 0; c < g.size(); ++c) {
      a[c] = static_cast<float>(g[c] / std::sqrt(double(v[c]) + 1e-5));
      sh[c] = static_cast<float>(b[c] - double(m[c]) * a[c]);
    }
    folded->add(p + "weight", {32}, a);
    folded->add(p + "bias", {32}, sh);
  }
  ThreadPool pool(2);
  auto be = make_backend_for(Isa::kGeneric, pool);
  const AudioModel plain(ckpt->config, ckpt->source, nullptr), fold(ckpt->config, folded, nullptr);
  const json ref = test::read_json(native + "/reference.json");
  for (const json& c : ref["clips"]) {
    const int64_t frames = c["num_frames_T"];
    const auto features = read_f32(native + "/" + c["input_features"].get<std::string>(), frames * 128);
    const AudioClip in[] = {{frames, features}};
    const auto want = plain.encode(*be, in)[0];
    expect_close(fold.encode(*be, in)[0].data(), want, 1e-5, c["name"].get<std::string>() + " folded");
  }
  folded->add("conformer.layers.0.extra.weight", {2}, {1.0f, 2.0f});
  try {
    const AudioModel extra(ckpt->config, folded, nullptr);
    ADD_FAILURE() << "an unknown tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected tensor 'conformer.layers.0.extra.weight'"), std::string::npos)
        << e.what();
  }
  auto missing = std::make_shared<FloatSource>();
  for (const std::string& n : ckpt->source->names())
    if (n != "conformer.layers.1.self_attn.bias_v") missing->add(n, ckpt->source->find(n)->shape, floats(n));
  try {
    const AudioModel m(ckpt->config, missing, nullptr);
    ADD_FAILURE() << "a missing tensor was not noticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'conformer.layers.1.self_attn.bias_v'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lfm
