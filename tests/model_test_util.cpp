#include "model_test_util.h"
#include "speech_test_util.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "model/weights.h"
#include "test_util.h"

#include "core/error.h"
#include "engine/engine.h"
#include "model/forward.h"

namespace lfm::test {

StatePlanOptions f32_plan(int64_t ctx, int64_t block_tokens) {
  StatePlanOptions p;
  p.ctx_size = ctx;
  p.block_tokens = block_tokens;
  p.type = DType::F32;
  return p;
}

std::vector<std::vector<float>> prompt_logits(const Model& model, Backend& backend, const std::vector<int32_t>& ids,
                                              const StatePlanOptions& plan) {
  auto cache = make_state_cache(model, plan, backend);
  Forward fwd(model, backend, *cache);
  StepOutput out;
  BatchItem item{cache->open(plan.ctx_size), ids, true};
  fwd.step(std::span<const BatchItem>(&item, 1), out);
  std::vector<std::vector<float>> rows;
  for (size_t p = 0; p < ids.size(); ++p) rows.emplace_back(out.row(0, static_cast<int64_t>(p)), out.row(0, static_cast<int64_t>(p)) + out.vocab);
  return rows;
}

Request greedy_request(const std::vector<int32_t>& prompt, int64_t n) {
  Request req;
  req.prompt = prompt;
  req.max_tokens = n;
  req.ignore_eos = true;
  return req;
}

std::vector<int32_t> generated_ids(RequestStream& stream) {
  std::vector<int32_t> got;
  Event ev;
  while (stream.next(ev)) {
    if (ev.kind == Event::Kind::kToken) got.push_back(ev.token);
    if (ev.kind == Event::Kind::kDone && ev.finish == FinishReason::kError) fail("test: generation failed: ", ev.error);
  }
  return got;
}

std::vector<int32_t> greedy(const Model& model, Backend& backend, const std::vector<int32_t>& prompt, int64_t n,
                            const Tokenizer* tok, const StatePlanOptions& plan) {
  EngineOptions eo;
  eo.state = plan;
  Engine engine(model, backend, tok, eo);
  return generated_ids(*engine.submit(greedy_request(prompt, n)));
}

namespace {
nlohmann::json text_model_config() {
  return {{"architectures", {"Lfm2ForCausalLM"}},
          {"model_type", "lfm2"},
          {"vocab_size", 65536},
          {"hidden_size", 32},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"layer_types", {"conv", "full_attention"}},
          {"block_ff_dim", 96},
          {"block_multiple_of", 32},
          {"bos_token_id", 1},
          {"eos_token_id", 7},
          {"pad_token_id", 0}};
}

void copy_text_files(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string tok_dir = data_dir() + "/tokenizer";
  fs::create_directories(dir);
  fs::copy_file(tok_dir + "/tokenizer.json", dir + "/tokenizer.json", fs::copy_options::overwrite_existing);
  fs::copy_file(tok_dir + "/tokenizer_config.json", dir + "/tokenizer_config.json",
                fs::copy_options::overwrite_existing);
  fs::copy_file(data_dir() + "/assets/lfm2/LFM2-1.2B/chat_template.jinja", dir + "/chat_template.jinja",
                fs::copy_options::overwrite_existing);
}
}  // namespace

void write_scripted_model(const std::string& dir, const std::vector<std::pair<int32_t, int32_t>>& next) {
  if (next.size() > 31) throw std::runtime_error("write_scripted_model: at most 31 transitions");
  copy_text_files(dir);
  nlohmann::json cfg = text_model_config();
  cfg["tie_word_embeddings"] = false;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  const ModelConfig c = parse_model_config(cfg);
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& t : expected_tensors(c, true)) entries.push_back({t.name, DType::F32, t.shape});
  SafetensorsWriter w(dir + "/model.safetensors", entries);
  const int64_t d = c.hidden_size;
  for (const auto& e : entries) {
    int64_t n = 1;
    for (int64_t x : e.shape) n *= x;
    std::vector<float> v(static_cast<size_t>(n), 0.0f);
    if (e.name.find("norm") != std::string::npos) std::fill(v.begin(), v.end(), 1.0f);
    // Transition i: token `from` embeds as unit vector e_(i+1); output row `to` reads that
    // direction; unknown tokens embed as e_0, read by output row 0.
    if (e.name == "model.embed_tokens.weight") {
      for (int64_t t = 0; t < c.vocab_size; ++t) v[t * d] = 1.0f;
      for (size_t i = 0; i < next.size(); ++i) {
        v[next[i].first * d] = 0.0f;
        v[next[i].first * d + static_cast<int64_t>(i) + 1] = 1.0f;
      }
    }
    if (e.name == "lm_head.weight") {
      v[0] = 10.0f;
      for (size_t i = 0; i < next.size(); ++i) v[next[i].second * d + static_cast<int64_t>(i) + 1] = 10.0f;
    }
    w.write(e.name, v.data(), v.size() * 4);
  }
  w.finish();
}

namespace {
void write_audio_model_from(const std::string& dir, const std::string& fixture);
}

void write_audio_model(const std::string& dir) { write_audio_model_from(dir, data_dir() + "/audio/lfm2audio_tiny_a"); }

void write_speech_model(const std::string& dir) {
  write_audio_model_from(dir, data_dir() + "/audio/lfm2audio_tts_tiny");
  // Its audio detokenizer (waveforms): tests/data/audio/detokenizer_tiny.
  std::filesystem::create_directories(dir + "/audio_detokenizer");
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(data_dir() + "/audio/detokenizer_tiny/" + f, dir + "/audio_detokenizer/" + f,
                               std::filesystem::copy_options::overwrite_existing);
}

namespace {
void write_audio_model_from(const std::string& dir, const std::string& fixture) {
  copy_text_files(dir);
  nlohmann::json cfg = read_json(fixture + "/config.json");
  const nlohmann::json tok = read_json(dir + "/tokenizer.json");
  int64_t vocab = 0;
  for (const auto& [piece, id] : tok["model"]["vocab"].items()) vocab = std::max<int64_t>(vocab, id.get<int64_t>() + 1);
  for (const auto& added : tok["added_tokens"]) vocab = std::max<int64_t>(vocab, added["id"].get<int64_t>() + 1);
  cfg["vocab_size"] = vocab;
  cfg["lfm"]["vocab_size"] = vocab;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  const SafetensorsCheckpoint src(fixture);
  std::vector<SafetensorsWriter::Entry> entries;
  const std::string embed = "model.lfm.embed_tokens.weight";
  for (const std::string& name : src.names()) {
    const TensorView* t = src.find(name);
    std::vector<int64_t> shape = t->shape;
    if (name == embed) shape[0] = vocab;
    entries.push_back({name, t->dtype, shape});
  }
  SafetensorsWriter w(dir + "/model.safetensors", entries);
  std::mt19937 rng(58);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  for (const auto& e : entries) {
    const TensorView* t = src.find(e.name);
    if (e.name != embed) {
      w.write(e.name, t->data, t->nbytes);
      continue;
    }
    std::vector<float> v(static_cast<size_t>(vocab * t->shape[1]));
    std::memcpy(v.data(), t->data, t->nbytes);
    for (size_t i = t->nbytes / sizeof(float); i < v.size(); ++i) v[i] = nd(rng);
    w.write(e.name, v.data(), v.size() * sizeof(float));
  }
  w.finish();
}
}  // namespace

void write_text_model(const std::string& dir) {
  copy_text_files(dir);
  const nlohmann::json cfg = text_model_config();
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  const ModelConfig c = parse_model_config(cfg);
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& t : expected_tensors(c, false)) entries.push_back({t.name, DType::BF16, t.shape});
  SafetensorsWriter w(dir + "/model.safetensors", entries);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  for (const auto& e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = f32_to_bf16(e.name.find("norm") != std::string::npos ? 1.0f : nd(rng));
    w.write(e.name, v.data(), v.size() * 2);
  }
  w.finish();
}

}  // namespace lfm::test
