// LFM2-VL against Hugging Face transformers (tests/data/hf_vl: tiny random checkpoints and the
// outputs of transformers 5.2.0's Lfm2VlForConditionalGeneration in float32): the vision tower and
// projector per tile, the position-embedding resize, full-sequence logits with image embeddings in
// place of the image tokens, and greedy generation through the engine, alone, batched with text
// requests and from the prefix cache.
// Tolerances: activations and logits within 1e-4 absolute; greedy tokens identical (every
// recorded step wins its argmax by at least 5e-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "convert/gguf_export.h"
#include "convert/gguf_tokenizer_meta.h"
#include "convert/mmproj_export.h"
#include "formats/safetensors.h"
#include "kernels/cpu_backend.h"
#include "model/forward.h"
#include "model/mmproj.h"
#include "model/vision_model.h"
#include "engine_test_util.h"
#include "model_test_util.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

constexpr double kTol = 1e-4;
using nlohmann::json;

std::string vl_dir(const std::string& name = "") { return test::data_dir() + "/hf_vl" + (name.empty() ? "" : "/" + name); }

std::vector<float> tensor_floats(const TensorSource& src, const std::string& name) {
  const TensorView* t = src.find(name);
  if (!t) throw Error("test: missing reference tensor " + name);
  const float* p = static_cast<const float*>(t->data);
  return std::vector<float>(p, p + t->numel());
}

// The U8 tensors of a safetensors file (lfm's reader takes only float types): name → bytes.
std::map<std::string, std::vector<uint8_t>> read_u8_tensors(const std::string& path) {
  const std::string bytes = test::read_file(path);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const json h = json::parse(bytes.substr(8, header));
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__" || t["dtype"] != "U8") continue;
    const size_t b = t["data_offsets"][0], e = t["data_offsets"][1];
    out[name].assign(bytes.begin() + static_cast<std::ptrdiff_t>(8 + header + b),
                     bytes.begin() + static_cast<std::ptrdiff_t>(8 + header + e));
  }
  return out;
}

// A preprocessed tile of processor config (b): uint8 levels → pixel values (level − 127.5) / 127.5.
std::vector<float> tile_pixels(const std::map<std::string, std::vector<uint8_t>>& pre, const std::string& name) {
  auto it = pre.find(name);
  if (it == pre.end()) throw Error("test: missing preprocessed tile " + name);
  std::vector<float> out(it->second.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>((it->second[i] - 127.5) / 127.5);
  return out;
}

void expect_close(const float* got, const std::vector<float>& want, double tol, const std::string& what) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::fabs(got[i] - want[i]) > worst) worst = std::fabs(got[i] - want[i]), at = i;
  EXPECT_LE(worst, tol) << what << ": worst difference at element " << at << " (" << got[at] << " vs " << want[at]
                        << ")";
}

// One recorded case (reference.json `cases[]`): its ids and its tiles in prompt order, each with
// the position of its first image token (the runs of image tokens, in order).
struct VlCase {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;
  std::vector<ImageInput::Tile> tiles;
  std::vector<std::string> images;  // per tile: the image file it came from
};

class VisionModelTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    const auto& [fixture, backend] = GetParam();
    if (backend == "fake-device" || backend == "fake-device-replay" || backend == "cuda" ||
        backend == "cuda-emu") {
      // A backend whose memory the host may not read (every op checks it gets only backend
      // memory: the vision path is device-neutral), or the GPU (skipped without one).
      std::string why;
      backend_ = test::make_named_backend(backend, pool_, load_, &why);
      if (!backend_) GTEST_SKIP() << why;
    } else {
      if (!isa_supported(parse_isa(backend))) GTEST_SKIP() << "CPU lacks " << backend;
      backend_ = make_backend_for(parse_isa(backend), pool_);
    }
    model_ = load_model(vl_dir(fixture), load_);
    ASSERT_NE(model_->vision(), nullptr);
    ref_ = test::read_json(vl_dir(fixture) + "/reference.json");
    tensors_ = std::make_unique<SafetensorsFile>(vl_dir(fixture) + "/reference.safetensors");
    pre_ = read_u8_tensors(vl_dir("preprocess_b.safetensors"));
    for (const json& c : ref_["cases"]) {
      VlCase vc;
      vc.name = c["name"];
      vc.ids = c["input_ids"].get<std::vector<int32_t>>();
      vc.greedy = c["greedy_ids"].get<std::vector<int32_t>>();
      size_t next = 0;
      const int32_t image_token = model_->vision()->config().image_token_id;
      for (const json& t : c.value("tiles", json::array())) {
        ImageInput::Tile tile;
        tile.grid_h = t["spatial_shape"][0];
        tile.grid_w = t["spatial_shape"][1];
        tile.patches = tile_pixels(pre_, t["preprocess_b_tensor"]);
        tile.tokens = model_->vision()->tokens_for(tile.grid_h, tile.grid_w);
        while (next < vc.ids.size() && vc.ids[next] != image_token) ++next;
        tile.position = static_cast<int64_t>(next);
        next += static_cast<size_t>(tile.tokens);
        vc.tiles.push_back(std::move(tile));
        vc.images.push_back(t["image"]);
      }
      cases_.push_back(std::move(vc));
    }
  }

  // The case's images as the engine takes them (tiles grouped by image, hashes distinct per file).
  std::vector<std::shared_ptr<const ImageInput>> images_of(const VlCase& c) const {
    std::vector<std::shared_ptr<const ImageInput>> out;
    std::string current;
    for (size_t t = 0; t < c.tiles.size(); ++t) {
      if (out.empty() || c.images[t] != current) {
        out.push_back(std::make_shared<ImageInput>());
        current = c.images[t];
        const_cast<ImageInput&>(*out.back()).hash = std::hash<std::string>()(current);
      }
      const_cast<ImageInput&>(*out.back()).tiles.push_back(c.tiles[t]);
    }
    return out;
  }

  ThreadPool pool_{2};
  LoadOptions load_;                  // the backend that prepares the weights, for the named ones
  std::unique_ptr<Backend> backend_;  // outlives the models whose weights it prepared
  std::unique_ptr<Model> model_;
  json ref_;
  std::unique_ptr<SafetensorsFile> tensors_;
  std::map<std::string, std::vector<uint8_t>> pre_;
  std::vector<VlCase> cases_;
};

// One full-sequence step of a case on `seq`: its tiles encoded by `model`'s vision tower and
// their embeddings in place of the image tokens; every position's logits.
StepOutput full_step(const Model& model, Backend& be, Forward& fwd, Sequence* seq, const VlCase& c) {
  std::vector<VisionTile> tiles;
  for (const auto& t : c.tiles) tiles.push_back({t.grid_h, t.grid_w, t.patches});
  const auto embeds = model.vision()->encode(be, tiles);
  std::vector<BatchItem::Embeddings> rows;
  for (size_t t = 0; t < c.tiles.size(); ++t) rows.push_back({c.tiles[t].position, c.tiles[t].tokens, embeds[t].data()});
  BatchItem item{seq, c.ids, /*all_logits=*/true};
  item.embeddings = rows;
  StepOutput out;
  fwd.step(std::span(&item, 1), out);
  return out;
}

TEST_P(VisionModelTest, TowerAndProjectorMatchTransformersPerTile) {
  const VisionModel& vm = *model_->vision();
  for (const VlCase& c : cases_) {
    if (c.tiles.empty()) continue;
    std::vector<VisionTile> tiles;
    for (const auto& t : c.tiles) tiles.push_back({t.grid_h, t.grid_w, t.patches});
    std::vector<float> hidden;
    const auto out = vm.encode(*backend_, tiles, [&](const std::string& name, const float* data, int64_t rows,
                                                     int64_t cols) {
      if (name == "vision.post_layernorm") hidden.assign(data, data + rows * cols);
    });
    ASSERT_EQ(out.size(), c.tiles.size());
    int64_t row = 0;
    const int64_t D = vm.config().hidden_size;
    for (size_t t = 0; t < c.tiles.size(); ++t) {
      const std::string key = c.name + "/" + std::to_string(t);
      expect_close(hidden.data() + row * D,
                   tensor_floats(*tensors_, c.name + "/vision_last_hidden_state/" + std::to_string(t)), kTol,
                   key + " vision tower");
      const auto want = tensor_floats(*tensors_, c.name + "/image_features/" + std::to_string(t));
      ASSERT_EQ(out[t].size(), want.size()) << key;
      expect_close(out[t].data(), want, kTol, key + " projector");
      row += c.tiles[t].grid_h * c.tiles[t].grid_w;
    }
  }
}

TEST_P(VisionModelTest, LogitsMatchTransformersWithImageEmbeddings) {
  StatePlanOptions plan;
  plan.ctx_size = 256;
  plan.block_tokens = 16;
  plan.type = DType::F32;
  auto cache = make_state_cache(*model_, plan, *backend_);
  Forward fwd(*model_, *backend_, *cache);
  for (const VlCase& c : cases_) {
    Sequence* seq = cache->open(plan.ctx_size);
    const StepOutput out = full_step(*model_, *backend_, fwd, seq, c);
    const auto want = tensor_floats(*tensors_, c.name + "/logits");
    ASSERT_EQ(out.logits.size(), want.size()) << c.name;
    expect_close(out.logits.data(), want, kTol, c.name + " logits");
    cache->close(seq);
  }
}

TEST_P(VisionModelTest, PositionEmbeddingsResizeAsTransformers) {
  const json tables = test::read_json(vl_dir("posemb_resize.json"))["tables"];
  const std::string fixture = std::get<0>(GetParam());
  for (const json& t : tables) {
    if (t["name"].get<std::string>().find(fixture) == std::string::npos) continue;
    for (const json& o : t["outputs"]) {
      const int64_t gh = o["grid_hw"][0], gw = o["grid_hw"][1];
      std::vector<float> want;
      for (const json& row : o["values"])
        for (const json& v : row) want.push_back(v.get<float>());
      const auto got = model_->vision()->position_embeddings(gh, gw);
      ASSERT_EQ(got.size(), want.size());
      expect_close(got.data(), want, 1e-6, cat("grid ", gh, "x", gw));
    }
  }
}

// llama.cpp's GGUF pair (`lfm convert` writes it): the lfm2 GGUF and the mmproj GGUF load back to
// the same logits (F32), the names map both ways, and the vision tower's files are told apart.
TEST_P(VisionModelTest, TheGgufPairGivesTheSameLogits) {
  const std::string fixture = std::get<0>(GetParam());
  const test::TempDir dir("vl_gguf");
  const std::string text = (dir / "text.gguf").string(), mmproj = (dir / "mmproj.gguf").string();
  {
    auto m = load_model(vl_dir(fixture), LoadOptions{.pack = false});
    gguf::ExportOptions opt;
    opt.type = gguf::FileType::F32;
    opt.extra = gguf::tokenizer_metadata_from_folder(vl_dir(fixture), m->config().vocab_size);
    gguf::SourceRowProducer rows(m->source());
    gguf::write_gguf_model(text, m->config(), rows, opt);
    const auto vision = open_vision_checkpoint(vl_dir(fixture));
    ASSERT_TRUE(vision.has_value());
    for (const std::string& name : vision->source->names()) {
      const auto theirs = mmproj_name_from_lfm(name);
      ASSERT_TRUE(theirs.has_value()) << name;
      EXPECT_EQ(lfm_name_from_mmproj(*theirs), name);
    }
    gguf::write_mmproj_gguf(mmproj, vision->config, *vision->source, /*f32=*/true, "test");
  }
  LoadOptions lo = load_;
  lo.mmproj = mmproj;
  auto pair = load_model(text, lo);
  ASSERT_NE(pair->vision(), nullptr);
  EXPECT_EQ(pair->vision()->config().image_token_id, 396);
  StatePlanOptions plan;
  plan.ctx_size = 256;
  plan.type = DType::F32;
  auto cache = make_state_cache(*pair, plan, *backend_);
  Forward fwd(*pair, *backend_, *cache);
  for (const VlCase& c : cases_) {
    Sequence* seq = cache->open(plan.ctx_size);
    const StepOutput out = full_step(*pair, *backend_, fwd, seq, c);
    expect_close(out.logits.data(), tensor_floats(*tensors_, c.name + "/logits"), kTol, c.name + " logits (GGUF pair)");
    cache->close(seq);
  }
  // A language-model GGUF is no mmproj; an mmproj needs a .gguf language model.
  LoadOptions wrong;
  wrong.mmproj = text;
  EXPECT_THROW(load_model(text, wrong), Error);
  EXPECT_THROW(load_model(vl_dir(fixture), lo), Error);
}

EngineOptions engine_options(bool prefix_cache) {
  EngineOptions opt;
  opt.state.ctx_size = 256;
  opt.state.parallel = 4;
  opt.state.block_tokens = 16;
  opt.state.type = DType::F32;
  opt.state.prefix_cache = prefix_cache;
  return opt;
}

Request greedy_request(const VlCase& c, std::vector<std::shared_ptr<const ImageInput>> images) {
  Request r;
  r.prompt = c.ids;
  r.max_tokens = static_cast<int64_t>(c.greedy.size());
  r.ignore_eos = true;
  r.images = std::move(images);
  return r;
}

TEST_P(VisionModelTest, EngineGreedyMatchesAloneBatchedAndFromThePrefixCache) {
  Engine engine(*model_, *backend_, nullptr, engine_options(true));
  for (const VlCase& c : cases_) {
    SCOPED_TRACE(c.name);
    // Alone, cold.
    const auto first = test::collect(*engine.submit(greedy_request(c, images_of(c))));
    EXPECT_EQ(first.tokens, c.greedy);
    // Again with two text requests beside it: the same tokens, the image's blocks from the cache.
    Request text1, text2;
    text1.prompt = {1, 6, 600, 601, 602, 603, 604, 605, 606};
    text2.prompt = std::vector<int32_t>(40, 620);
    text1.max_tokens = text2.max_tokens = 10;
    text1.ignore_eos = text2.ignore_eos = true;
    auto s1 = engine.submit(text1);
    auto again = engine.submit(greedy_request(c, images_of(c)));
    auto s2 = engine.submit(text2);
    const auto second = test::collect(*again);
    test::collect(*s1);
    test::collect(*s2);
    EXPECT_EQ(second.tokens, c.greedy);
    if (!c.tiles.empty()) {
      EXPECT_GE(second.usage.cached_tokens, 16) << "the repeated image missed the prefix cache";
    }
  }
}

// While another request decodes, an image is encoded in stages over several steps (one stage per
// step with a tiny slice), so that stream goes on; with nothing decoding it is encoded at once.
// The tokens of both are the same as alone.
TEST_P(VisionModelTest, EncodingYieldsToADecodingStream) {
  EngineOptions o = engine_options(false);
  o.encode_slice_ms = 1e-6;
  const int64_t stages = model_->vision()->config().n_layers + 2;
  Request text;
  text.prompt = {1, 6, 600, 601, 602};
  text.max_tokens = 200;
  text.ignore_eos = true;
  const auto text_alone = test::collect(*Engine(*model_, *backend_, nullptr, o).submit(text));
  for (const VlCase& c : cases_) {
    if (c.tiles.empty()) continue;
    SCOPED_TRACE(c.name);
    // Fresh engines: no encoded tile kept from before.
    Engine lone(*model_, *backend_, nullptr, o);
    const auto alone = test::collect(*lone.submit(greedy_request(c, images_of(c))));
    EXPECT_EQ(alone.tokens, c.greedy);
    EXPECT_EQ(alone.usage.encode_steps, 1) << "nothing decoded beside it: the image is encoded at once";
    Engine engine(*model_, *backend_, nullptr, o);
    auto stream = engine.submit(text);
    Event first;
    ASSERT_TRUE(stream->next(first));  // the text request decodes from here on
    const auto beside = test::collect(*engine.submit(greedy_request(c, images_of(c))));
    stream->cancel();  // what it gave until then is enough
    auto rest = test::collect(*stream);
    rest.tokens.insert(rest.tokens.begin(), first.token);
    EXPECT_EQ(beside.tokens, c.greedy);
    ASSERT_LE(rest.tokens.size(), text_alone.tokens.size());
    EXPECT_GT(rest.tokens.size(), static_cast<size_t>(stages)) << "the stream should have decoded beside the image";
    EXPECT_TRUE(std::equal(rest.tokens.begin(), rest.tokens.end(), text_alone.tokens.begin()));
    EXPECT_GE(beside.usage.encode_steps, stages) << "the encoding was not spread over the stream's steps";
    EXPECT_EQ(beside.usage.image_tiles, alone.usage.image_tiles);
  }
}

TEST_P(VisionModelTest, ADifferentImageWithTheSameLayoutNeverHitsTheCachedOne) {
  Engine engine(*model_, *backend_, nullptr, engine_options(true));
  for (const VlCase& c : cases_) {
    if (c.tiles.empty()) continue;
    SCOPED_TRACE(c.name);
    test::collect(*engine.submit(greedy_request(c, images_of(c))));
    // The same prompt and grids, other pixels (and so another hash): cached at most up to the
    // first image token, and its output is what a cold engine gives.
    auto other = images_of(c);
    for (auto& img : other) {
      auto copy = std::make_shared<ImageInput>(*img);
      for (auto& t : copy->tiles)
        for (float& v : t.patches) v = -v;
      copy->hash ^= 0x5555;
      img = copy;
    }
    const auto warm = test::collect(*engine.submit(greedy_request(c, other)));
    EXPECT_LE(warm.usage.cached_tokens, c.tiles.front().position);
    Engine cold(*model_, *backend_, nullptr, engine_options(false));
    EXPECT_EQ(warm.tokens, test::collect(*cold.submit(greedy_request(c, other))).tokens);
  }
}

// Every case at once, twice over, in a pool too small for them: requests are preempted and
// resumed (their images' embeddings kept, their tokens recomputed) and still give their tokens.
TEST_P(VisionModelTest, ImageRequestsSurvivePreemption) {
  EngineOptions o = engine_options(true);
  o.state.parallel = 8;
  // Room for the largest request and a block more: every other request must wait or be preempted.
  int64_t most = 0;
  for (const VlCase& c : cases_)
    most = std::max<int64_t>(most, (static_cast<int64_t>(c.ids.size() + c.greedy.size()) + 15) / 16);
  o.state.ctx_size = most * 16;
  o.state.pad_rows = backend_->decode_step_max_pad();  // as the engine plans it
  o.state.memory_bytes = kv_memory_for_blocks(model_->config(), o.state, most + 1);
  Engine engine(*model_, *backend_, nullptr, o);
  std::vector<std::pair<const VlCase*, std::shared_ptr<RequestStream>>> streams;
  for (int round = 0; round < 2; ++round)
    for (const VlCase& c : cases_) streams.emplace_back(&c, engine.submit(greedy_request(c, images_of(c))));
  for (auto& [c, stream] : streams) {
    const auto r = test::collect(*stream);
    EXPECT_EQ(r.tokens, c->greedy) << c->name << ": " << r.error;
  }
  engine.wait_idle();
  EXPECT_GT(engine.stats().preemptions, 0) << "the pool was meant to be too small";
}

TEST_P(VisionModelTest, ImageRequestsAreCheckedAtSubmit) {
  Engine engine(*model_, *backend_, nullptr, engine_options(true));
  const VlCase* c = nullptr;
  for (const VlCase& vc : cases_)
    if (!vc.tiles.empty()) c = &vc;
  ASSERT_NE(c, nullptr);
  auto shifted = images_of(*c);
  auto img = std::make_shared<ImageInput>(*shifted.front());
  img->tiles.front().position -= 1;  // onto a text token
  shifted.front() = img;
  EXPECT_THROW(engine.submit(greedy_request(*c, shifted)), Error);
  auto truncated = images_of(*c);
  auto img2 = std::make_shared<ImageInput>(*truncated.front());
  img2->tiles.front().patches.pop_back();
  truncated.front() = img2;
  EXPECT_THROW(engine.submit(greedy_request(*c, truncated)), Error);
}

// Every CPU backend the build has, the fake device, and the GPU (skipped without one).
std::vector<std::string> vision_backends() {
  std::vector<std::string> out;
  for (const auto& isa : test::all_isas()) out.push_back(isa);
  out.push_back("fake-device");
  out.push_back("fake-device-replay");  // the ops queued and replayed, as CUDA graphs run them
  out.push_back("cuda");
#if LFM_HAVE_CUDA_EMU
  out.push_back("cuda-emu");  // the CUDA backend's kernels on the CPU emulator
#endif
  return out;
}

INSTANTIATE_TEST_SUITE_P(Vl, VisionModelTest,
                         ::testing::Combine(::testing::Values("lfm2vl_a_tied_ln", "lfm2vl_b_untied_noln"),
                                            ::testing::ValuesIn(vision_backends())),
                         [](const auto& info) { return test::fixture_backend_name(info); });

TEST(VisionModel, TextOnlyModelsHaveNoVisionTowerAndRefuseImages) {
  ThreadPool pool(2);
  auto backend = make_backend_for(parse_isa("generic"), pool);
  auto model = load_model(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32"));
  EXPECT_EQ(model->vision(), nullptr);
  Engine engine(*model, *backend, nullptr, engine_options(true));
  Request r;
  r.prompt = {1, 2, 3};
  r.images.push_back(std::make_shared<ImageInput>());
  EXPECT_THROW(engine.submit(r), Error);
}

}  // namespace
}  // namespace lfm
