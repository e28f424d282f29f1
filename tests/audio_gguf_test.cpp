// LFM2-Audio as llama.cpp's GGUF pair (model/audio_mmproj.h, convert/audio_mmproj_export.h):
// `lfm convert` of the tiny transformers checkpoint writes a backbone GGUF (lfm2, the "model.lfm."
// tensors) and an lfm2a mmproj with the keys, names, shapes and types llama.cpp's clip.cpp reads;
// reading the mmproj back gives every encoder tensor of the folder under its binding name (the
// BatchNorm as the fold of the folder's γ, β, mean, var); malformed mmproj files fail naming the
// tensor or key; `lfm gen-random --audio` writes a folder whose conversion equals its direct pair.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <filesystem>
#include <functional>

#include "convert/audio_folder.h"
#include "core/error.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "kernels/dequant.h"
#include "model/audio_mmproj.h"
#include "model/gguf_model.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "kernels/cpu_backend.h"
#include "model/audio_model.h"
#include "model/model.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

std::string tiny_a() { return test::data_dir() + "/audio/lfm2audio_tiny_a"; }

std::vector<float> values(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dequantize_row(t.dtype, t.data, v.data(), t.numel());
  return v;
}

void expect_u32(const gguf::GgufFile& f, const std::string& key, uint64_t want) {
  const gguf::Value* v = f.find(key);
  ASSERT_NE(v, nullptr) << key;
  EXPECT_EQ(v->type, gguf::ValueType::U32) << key << " (clip.cpp's get_u32 reads a u32)";
  EXPECT_EQ(v->u, want) << key;
}

// A copy of an mmproj with edits: keys replaced or dropped, a tensor dropped or given other dims.
struct Edit {
  std::map<std::string, gguf::Value> set;
  std::string drop_key, drop_tensor, reshape_tensor;
  std::vector<int64_t> new_ne;
};
std::string edited_copy(const std::string& src_path, const std::string& out, const Edit& e) {
  const gguf::GgufFile src(src_path);
  gguf::GgufWriter w;
  for (const auto& [k, v] : src.metadata())
    if (k != "general.alignment" && k != e.drop_key) w.set(k, v);
  for (const auto& [k, v] : e.set) w.set(k, v);
  std::vector<const gguf::TensorInfo*> kept;
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (t.name == e.drop_tensor) continue;
    w.add_tensor(t.name, t.name == e.reshape_tensor ? e.new_ne : t.ne, t.dtype);
    kept.push_back(&t);
  }
  w.begin(out);
  for (const gguf::TensorInfo* t : kept) w.write(t->data, t->nbytes);
  w.finish();
  return out;
}

class AudioGguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("lfm_audio_gguf");
    for (const char* type : {"f32", "f16"}) {
      const auto r = test::run_lfm(std::string("convert -q -m '") + tiny_a() + "' -o '" + dir_->str() + "/text-" +
                                   type + ".gguf' --type " + type);
      ASSERT_EQ(r.code, 0) << r.out;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(const std::string& name) { return (*dir_ / name).string(); }
  // The converted F32 mmproj as the engine reads it.
  static std::shared_ptr<const gguf::GgufFile> mmproj(const std::string& type = "f32") {
    return std::make_shared<const gguf::GgufFile>(path("mmproj-text-" + type + ".gguf"));
  }
  static std::string load_error(const std::string& file, int64_t text_hidden = 64) {
    try {
      auto f = std::make_shared<const gguf::GgufFile>(file);
      const AudioConfig c = audio_config_from_mmproj(*f, text_hidden, 133);
      audio_mmproj_tensor_source(f, c);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  static test::TempDir* dir_;
};
test::TempDir* AudioGguf::dir_ = nullptr;

TEST_F(AudioGguf, MmprojHasTheKeysClipCppReads) {
  const auto f = mmproj();
  ASSERT_NE(f->find("general.architecture"), nullptr);
  EXPECT_EQ(f->find("general.architecture")->str, "clip");
  EXPECT_EQ(f->find("general.type")->str, "mmproj");
  EXPECT_EQ(f->find("clip.projector_type")->str, "lfm2a");
  ASSERT_NE(f->find("clip.has_audio_encoder"), nullptr);
  EXPECT_EQ(f->find("clip.has_audio_encoder")->type, gguf::ValueType::BOOL);
  EXPECT_TRUE(f->find("clip.has_audio_encoder")->b);
  EXPECT_EQ(f->find("clip.has_vision_encoder"), nullptr);
  expect_u32(*f, "clip.audio.projection_dim", 64);
  expect_u32(*f, "clip.audio.embedding_length", 32);
  expect_u32(*f, "clip.audio.feed_forward_length", 32);  // d_model, as llama.cpp's converter writes it
  expect_u32(*f, "clip.audio.block_count", 2);
  expect_u32(*f, "clip.audio.attention.head_count", 4);
  expect_u32(*f, "clip.audio.num_mel_bins", 128);
  const gguf::Value* eps = f->find("clip.audio.attention.layer_norm_epsilon");
  ASSERT_NE(eps, nullptr);
  EXPECT_EQ(eps->type, gguf::ValueType::F32);
  EXPECT_FLOAT_EQ(static_cast<float>(eps->f), 1e-5f);
}

TEST_F(AudioGguf, MmprojNamesShapesAndTypesAreLlamaCpps) {
  const auto f = mmproj("f16");
  auto tensor = [&](const std::string& n) {
    const gguf::TensorInfo* t = f->find_tensor(n);
    EXPECT_NE(t, nullptr) << n;
    return t ? *t : gguf::TensorInfo{};
  };
  // ggml dims (ne[0] innermost) and storage types as clip.cpp's graph uses them.
  EXPECT_EQ(tensor("a.conv1d.0.weight").ne, (std::vector<int64_t>{3, 3, 1, 4}));
  EXPECT_EQ(tensor("a.conv1d.3.weight").ne, (std::vector<int64_t>{1, 1, 4, 4}));
  EXPECT_EQ(tensor("a.conv1d.5.bias").ne, (std::vector<int64_t>{1, 1, 4}));
  EXPECT_EQ(tensor("a.pre_encode.out.weight").ne, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(tensor("a.blk.1.conv_pw1.weight").ne, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(tensor("a.blk.1.conv_dw.weight").ne, (std::vector<int64_t>{9, 32}));
  EXPECT_EQ(tensor("a.blk.1.conv_pw2.weight").ne, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(tensor("a.blk.0.pos_bias_u").ne, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(tensor("a.blk.0.ffn_up_1.weight").ne, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(tensor("mm.a.mlp.3.weight").ne, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(tensor("a.position_embd.weight").ne, (std::vector<int64_t>{64, 32}));  // ne[0] = D
  EXPECT_EQ(tensor("a.embd_to_logits.weight").ne, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(f->find_tensor("a.blk.0.conv_norm.running_mean"), nullptr);
  EXPECT_EQ(f->find_tensor("a.blk.0.linear_pos.bias"), nullptr);
  for (const gguf::TensorInfo& t : f->tensors()) {
    const bool conv = t.name.starts_with("a.conv1d.") || t.name.find(".conv_") != std::string::npos;
    if (conv || t.ne.size() == 1) {
      EXPECT_EQ(t.ggml_type, gguf::ggml_type::F32) << t.name;
    }
  }
  EXPECT_EQ(tensor("a.blk.0.attn_q.weight").ggml_type, gguf::ggml_type::F16);
  EXPECT_EQ(tensor("mm.a.mlp.1.weight").ggml_type, gguf::ggml_type::F16);
  // 5 subsampling convs ×2, the linear ×2, 2 blocks × 37 (2 FFNs ×4, 5 norms ×2, q/k/v/o ×2,
  // linear_pos, pos_bias_u/v, 4 conv parts ×2), the adapter ×6, 3 audio-output tensors.
  EXPECT_EQ(f->tensors().size(), 10u + 2 + 2 * 37 + 6 + 3);
}

TEST_F(AudioGguf, ConfigComesFromKeysAndShapes) {
  const auto f = mmproj();
  const AudioConfig c = audio_config_from_mmproj(*f, 64, 133);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.intermediate_size, 64);  // ffn_up's rows, not feed_forward_length
  EXPECT_EQ(c.conv_kernel_size, 9);
  EXPECT_EQ(c.subsampling_channels, 4);
  EXPECT_EQ(c.num_mel_bins, 128);
  EXPECT_EQ(c.text_hidden_size, 64);
  EXPECT_EQ(c.audio_token_id, 133);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, static_cast<double>(1e-5f));
  EXPECT_EQ(c.front_end.num_mel_bins, 128);
  EXPECT_EQ(c.front_end.hop_length, 160);
  EXPECT_EQ(c.front_end.win_length, 400);
  EXPECT_THROW(audio_config_from_mmproj(*f, 48, 133), Error);  // projection_dim is the text width
}

TEST_F(AudioGguf, EveryEncoderTensorReadsBackAsTheFolders) {
  const auto f = mmproj();
  const AudioConfig c = audio_config_from_mmproj(*f, 64, 133);
  const auto src = audio_mmproj_tensor_source(f, c);
  const SafetensorsCheckpoint folder(tiny_a());
  const std::vector<AudioTensor> layout = lfm2a_tensor_layout(c, false);
  EXPECT_EQ(src->names().size(), layout.size());
  int folded = 0;
  for (const AudioTensor& t : layout) {
    const TensorView* got = src->find(t.name);
    ASSERT_NE(got, nullptr) << t.name;
    EXPECT_EQ(got->shape, t.shape) << t.name;
    const TensorView* orig = folder.find("model." + t.name);
    ASSERT_NE(orig, nullptr) << t.name;
    EXPECT_EQ(got->shape, orig->shape) << t.name;
    const std::vector<float> g = values(*got);
    if (!t.name.ends_with("conv.norm.weight") && !t.name.ends_with("conv.norm.bias")) {
      EXPECT_EQ(test::max_abs_diff(g, values(*orig)), 0.0) << t.name;
      continue;
    }
    // The fold of the folder's BatchNorm: a = γ/√(var+1e-5), b = β − mean·a, in float64.
    const std::string stem = "model." + t.name.substr(0, t.name.rfind('.'));
    const std::vector<float> gamma = values(*folder.find(stem + ".weight")), beta = values(*folder.find(stem + ".bias"));
    const std::vector<float> mean = values(*folder.find(stem + ".running_mean"));
    const std::vector<float> var = values(*folder.find(stem + ".running_var"));
    ASSERT_EQ(g.size(), gamma.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double a = gamma[i] / std::sqrt(static_cast<double>(var[i]) + 1e-5);
      const double want = t.name.ends_with("weight") ? a : beta[i] - mean[i] * a;
      EXPECT_LE(std::abs(g[i] - want), 1e-7 * std::abs(want)) << t.name << "[" << i << "]";
      EXPECT_NE(g[i], t.name.ends_with("weight") ? gamma[i] : beta[i]) << t.name << ": not folded";
    }
    ++folded;
  }
  EXPECT_EQ(folded, 4);  // weight and bias of 2 blocks
  // The audio-output tensors are written (llama.cpp reads them) but are not the encoder's.
  EXPECT_EQ(src->find("audio_embedding.embedding.weight"), nullptr);
  const gguf::TensorInfo* pos = f->find_tensor("a.position_embd.weight");
  ASSERT_NE(pos, nullptr);
  const TensorView* emb = folder.find("model.audio_embedding.embedding.weight");
  EXPECT_EQ(test::max_abs_diff(values(TensorView{pos->dtype, emb->shape, pos->data, pos->nbytes}), values(*emb)), 0.0);
}

TEST_F(AudioGguf, BackboneIsThePlainLfm2Gguf) {
  auto f = std::make_shared<const gguf::GgufFile>(path("text-f32.gguf"));
  EXPECT_EQ(f->find("general.architecture")->str, "lfm2");
  const ModelConfig c = gguf::config_from_gguf(*f);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.vocab_size, 256);
  for (const gguf::TensorInfo& t : f->tensors()) EXPECT_FALSE(t.name.starts_with("a.") || t.name.starts_with("mm.")) << t.name;
  const gguf::GgufTensorSource src(f);
  const SafetensorsCheckpoint folder(tiny_a());
  int compared = 0;
  for (const std::string& n : folder.names()) {
    if (!n.starts_with("model.lfm.")) continue;
    const TensorView* got = src.find("model." + n.substr(10));
    ASSERT_NE(got, nullptr) << n;
    EXPECT_EQ(test::max_abs_diff(values(*got), values(*folder.find(n))), 0.0) << n;
    ++compared;
  }
  EXPECT_GT(compared, 20);
}

TEST_F(AudioGguf, NamesMapBothWays) {
  AudioConfig c;
  c.hidden_size = 32;
  c.n_layers = 12;
  c.n_heads = 4;
  c.intermediate_size = 64;
  c.text_hidden_size = 64;
  for (const AudioTensor& t : lfm2a_tensor_layout(c, false)) {
    const std::optional<std::string> theirs = audio_mmproj_name(t.name);
    ASSERT_TRUE(theirs) << t.name;
    EXPECT_TRUE(theirs->starts_with("a.") || theirs->starts_with("mm.a.")) << *theirs;
    EXPECT_EQ(audio_binding_name(*theirs), t.name);
  }
  EXPECT_EQ(audio_mmproj_name("conformer.layers.11.self_attn.bias_v"), "a.blk.11.pos_bias_v");
  EXPECT_EQ(audio_mmproj_name("conformer.layers.3.conv.norm.weight"), "a.blk.3.conv_norm.weight");
  EXPECT_EQ(audio_mmproj_name("audio_adapter_linear_2.bias"), "mm.a.mlp.3.bias");
  EXPECT_EQ(audio_binding_name("a.position_embd.weight"), "audio_embedding.embedding.weight");
  EXPECT_FALSE(audio_mmproj_name("conformer.layers.0.conv.norm.running_var"));
  EXPECT_FALSE(audio_mmproj_name("conformer.subsampling.layers.1.weight"));  // a ReLU
  EXPECT_FALSE(audio_binding_name("a.blk.01.ln1.weight"));
  EXPECT_FALSE(audio_binding_name("v.blk.0.ln1.weight"));
  EXPECT_FALSE(audio_binding_name("a.blk.0.pos_bias_u.weight"));
}

TEST_F(AudioGguf, MalformedMmprojFailsNamingTheTensorOrKey) {
  const std::string src = path("mmproj-text-f32.gguf");
  EXPECT_EQ(load_error(src), "");
  Edit missing;
  missing.drop_tensor = "a.blk.1.conv_dw.bias";
  EXPECT_NE(load_error(edited_copy(src, path("bad1.gguf"), missing)).find("a.blk.1.conv_dw.bias"), std::string::npos);
  Edit shape;
  shape.reshape_tensor = "a.blk.1.attn_q.weight";
  shape.new_ne = {16, 64};
  const std::string e2 = load_error(edited_copy(src, path("bad2.gguf"), shape));
  EXPECT_NE(e2.find("a.blk.1.attn_q.weight"), std::string::npos) << e2;
  EXPECT_NE(e2.find("[32, 32]"), std::string::npos) << e2;
  Edit proj;
  proj.set.emplace("clip.projector_type", gguf::Value::of_string("lfm2"));
  const std::string e3 = load_error(edited_copy(src, path("bad3.gguf"), proj));
  EXPECT_NE(e3.find("clip.projector_type"), std::string::npos) << e3;
  EXPECT_NE(e3.find("'lfm2'"), std::string::npos) << e3;
  Edit key;
  key.drop_key = "clip.audio.block_count";
  EXPECT_NE(load_error(edited_copy(src, path("bad4.gguf"), key)).find("clip.audio.block_count"), std::string::npos);
  Edit blocks;  // one block fewer than the tensors: a.blk.1.* are strangers
  blocks.set.emplace("clip.audio.block_count", gguf::Value::of_u32(1));
  EXPECT_NE(load_error(edited_copy(src, path("bad5.gguf"), blocks)).find("a.blk.1."), std::string::npos);
  Edit more;  // one block more: a.blk.2.* are missing
  more.set.emplace("clip.audio.block_count", gguf::Value::of_u32(3));
  EXPECT_NE(load_error(edited_copy(src, path("bad6.gguf"), more)).find("a.blk.2."), std::string::npos);
  EXPECT_NE(load_error(src, 48).find("projection_dim"), std::string::npos);
}

TEST_F(AudioGguf, ConverterReadsTheFolderSizesFromShapes) {
  const SafetensorsCheckpoint folder(tiny_a());
  EXPECT_NE(folder.find("model.audio_embedding.embedding.weight"), nullptr);
  const std::optional<gguf::AudioFolder> a = gguf::read_audio_folder(tiny_a());
  ASSERT_TRUE(a);
  EXPECT_EQ(a->audio.hidden_size, 32);
  EXPECT_EQ(a->audio.n_layers, 2);
  EXPECT_EQ(a->audio.intermediate_size, 64);
  EXPECT_EQ(a->audio.num_mel_bins, 128);
  EXPECT_EQ(a->audio.text_hidden_size, 64);
  EXPECT_FALSE(gguf::read_audio_folder(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32")));
}

TEST_F(AudioGguf, GenRandomPairEqualsTheConvertedFolder) {
  const std::string folder = path("rand"), pair = path("rand-pair.gguf");
  auto r = test::run_lfm("gen-random -q --shape tiny --audio tiny --seed 3 -o '" + folder + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  r = test::run_lfm("gen-random -q --shape tiny --audio tiny --seed 3 --type f16 -o '" + pair + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  r = test::run_lfm("convert -q -m '" + folder + "' -o '" + path("rand-conv.gguf") + "' --type f16");
  ASSERT_EQ(r.code, 0) << r.out;
  // The folder: BatchNorm statistics a BatchNorm could have, LayerNorm gains 1.
  const SafetensorsCheckpoint ck(folder);
  for (const std::string& n : ck.names()) {
    const std::vector<float> v = values(*ck.find(n));
    if (n.ends_with("running_var")) {
      for (float x : v) EXPECT_GT(x, 0.4f) << n;
    }
    if (n.ends_with("norm_out.weight")) {
      for (float x : v) EXPECT_EQ(x, 1.0f) << n;
    }
  }
  const gguf::GgufFile direct(path("mmproj-rand-pair.gguf")), converted(path("mmproj-rand-conv.gguf"));
  ASSERT_EQ(direct.tensors().size(), converted.tensors().size());
  for (const gguf::TensorInfo& t : direct.tensors()) {
    const gguf::TensorInfo* u = converted.find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.ne, u->ne) << t.name;
    EXPECT_EQ(t.ggml_type, u->ggml_type) << t.name;
    ASSERT_EQ(t.nbytes, u->nbytes) << t.name;
    EXPECT_EQ(std::memcmp(t.data, u->data, t.nbytes), 0) << t.name;
  }
  auto mm = std::make_shared<const gguf::GgufFile>(path("mmproj-rand-pair.gguf"));
  const AudioConfig c = audio_config_from_mmproj(*mm, 256, 133);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.subsampling_channels, 8);
  EXPECT_EQ(audio_mmproj_tensor_source(mm, c)->names().size(), lfm2a_tensor_layout(c, false).size());
  EXPECT_EQ(gguf::config_from_gguf(gguf::GgufFile(pair)).hidden_size, 256);
}

}  // namespace
}  // namespace lfm

namespace lfm {
namespace {

// The pair loaded as the engine loads it (-m text.gguf --mmproj mmproj.gguf) gives transformers'
// greedy tokens for the fixture's prompt, with the clip's features as transformers computed them.
TEST_F(AudioGguf, ThePairGivesTransformersGreedyTokens) {
  using json = nlohmann::json;
  const json ref = test::read_json(tiny_a() + "/reference.json");
  const std::vector<int32_t> ids = ref["prompt"]["input_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> greedy;
  for (const json& g : ref["prompt"]["greedy"]) greedy.push_back(g["token"].get<int32_t>());
  const std::string feats = test::read_file(test::data_dir() + "/audio/frontend/features/" +
                                            ref["prompt"]["clip"].get<std::string>() + ".f32");
  ThreadPool pool(2);
  auto backend = make_cpu_backend(pool);
  for (const char* type : {"f32", "f16"}) {
    SCOPED_TRACE(type);
    LoadOptions lo;
    lo.mmproj = path(std::string("mmproj-text-") + type + ".gguf");
    auto model = load_model(path(std::string("text-") + type + ".gguf"), lo);
    ASSERT_NE(model->audio(), nullptr);
    auto clip = std::make_shared<AudioInput>();
    clip->mel_bins = 128;
    clip->features.resize(feats.size() / sizeof(float));
    std::memcpy(clip->features.data(), feats.data(), feats.size());
    clip->frames = static_cast<int64_t>(clip->features.size()) / 128;
    clip->tokens = model->audio()->tokens_for(clip->frames);
    clip->position = std::find(ids.begin(), ids.end(), 133) - ids.begin();
    clip->hash = 1;
    EngineOptions eo;
    eo.state.ctx_size = 64;
    eo.state.type = DType::F32;
    Engine engine(*model, *backend, nullptr, eo);
    Request r;
    r.prompt = ids;
    r.max_tokens = static_cast<int64_t>(greedy.size());
    r.ignore_eos = true;
    r.audios = {clip};
    const auto got = test::collect(*engine.submit(r));
    EXPECT_EQ(got.tokens, greedy) << got.error;
  }
}

}  // namespace
}  // namespace lfm
