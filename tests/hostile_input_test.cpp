// Hostile input (issue 12): hand-made files and values of each failure class — deep nesting,
// sizes at integer limits, ids beyond 32 bits, thread creation failure, unhelpful messages —
// each must give a clear lfm::Error naming the file/key and value, never a crash, a hang, a
// wrapped number or an exhausted memory. Run under ASan/UBSan as part of the suite.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "core/error.h"
#include "core/json_guard.h"
#include "core/limits.h"
#include "core/thread_pool.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "model/gguf_model.h"
#include "test_util.h"
#include "tokenizer/added_token_matcher.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lfm {
namespace {

using nlohmann::json;

// `[[[ ... ]]]` nested `depth` levels (~100k: far beyond any stack's recursion).
std::string deep_array(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// The message of the lfm::Error `fn` throws; fails the test when it throws nothing.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no lfm::Error thrown";
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

// ---- deep nesting ----------------------------------------------------------------------------

TEST(HostileJson, DepthLimitIsExactAndIgnoresStrings) {
  EXPECT_NO_THROW(check_json_depth(deep_array(kMaxJsonDepth), "x"));
  EXPECT_HAS(error_of([] { check_json_depth(deep_array(kMaxJsonDepth + 1), "thing"); }),
             "thing: JSON nesting deeper than 128 levels");
  // Brackets inside strings (also after an escaped quote) are text, not nesting.
  const std::string in_string = "[\"\\\"" + std::string(1000, '[') + "\"]";
  EXPECT_NO_THROW(check_json_depth(in_string, "x"));
  EXPECT_EQ(parse_json(in_string, "x")[0].get<std::string>().size(), 1001u);
  // Objects count too.
  std::string objects;
  for (int i = 0; i <= kMaxJsonDepth; ++i) objects += "{\"a\":";
  objects += "1" + std::string(kMaxJsonDepth + 1, '}');
  EXPECT_HAS(error_of([&] { parse_json(objects, "obj"); }), "obj: JSON nesting deeper");
  EXPECT_HAS(error_of([] { parse_ordered_json("{not json", "body"); }), "body is not valid JSON");
}

TEST(HostileJson, ExcerptIsBoundedAndSurvivesInvalidUtf8) {
  const json big = json(std::string(100000, 'x'));
  EXPECT_LE(json_excerpt(big).size(), 130u);
  EXPECT_HAS(json_excerpt(big), "…");
  // dump() would throw type_error 316 on these bytes; an error message must not.
  EXPECT_NO_THROW(json_excerpt(json(std::string("\xff\xfe"))));
  EXPECT_EQ(json_excerpt(json{{"a", 1}}), R"({"a":1})");
}

TEST(HostileJson, DeepConfigJsonIsRefusedWithTheFileName) {
  test::TempDir d;
  const std::string path = d.write("config.json", R"({"model_type": "lfm2", "x": )" + deep_array(100000) + "}");
  const std::string msg = error_of([&] { load_model_config(path); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "nesting deeper than 128 levels");
}

TEST(HostileJson, DeepSafetensorsHeaderAndIndex) {
  test::TempDir d;
  const std::string header = R"({"__metadata__": )" + deep_array(100000) + "}";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  const std::string path = d.write("model.safetensors", bytes + header);
  const std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "nesting deeper than 128 levels");

  test::TempDir sharded;
  sharded.write("model.safetensors.index.json", R"({"weight_map": )" + deep_array(100000) + "}");
  EXPECT_HAS(error_of([&] { SafetensorsCheckpoint c(sharded.str()); }), "model.safetensors.index.json");
}

TEST(HostileJson, DeepTokenizerFiles) {
  // A Sequence pre-tokenizer nested 100k levels: the reader flattens Sequences recursively.
  std::string text = R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": )";
  for (int i = 0; i < 100000; ++i) text += R"({"type": "Sequence", "pretokenizers": [)";
  for (int i = 0; i < 100000; ++i) text += "]}";
  text += "}";
  EXPECT_HAS(error_of([&] { parse_tokenizer_json_text(text); }), "tokenizer.json: JSON nesting deeper");

  test::TempDir d;
  d.write("tokenizer.json", test::minimal_tokenizer_json().dump());
  d.write("tokenizer_config.json", R"({"added_tokens_decoder": )" + deep_array(100000) + "}");
  EXPECT_HAS(error_of([&] { load_tokenizer_spec(d.str()); }), "tokenizer_config.json: JSON nesting deeper");
  EXPECT_HAS(error_of([&] { load_chat_template_source(d.str()); }), "tokenizer_config.json: JSON nesting deeper");
}

TEST(HostileJson, TemplateCliDeepToolsAndDirectoryMessages) {
  test::TempDir d;
  d.write("chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const std::string msgs = d.write("msgs.json", R"([{"role": "user", "content": "hi"}])");
  const std::string tools = d.write("tools.json", "[" + deep_array(100000) + "]");
  auto r = test::run_lfm("template -m " + d.str() + " --messages " + msgs + " --tools " + tools);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "--tools file '" + tools + "': JSON nesting deeper than 128 levels");
  // A directory is named as one, not reported as invalid JSON.
  r = test::run_lfm("template -m " + d.str() + " --messages " + d.str());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "is a directory, not a file");
  r = test::run_lfm("template -m " + d.str() + " --messages " + msgs + " --var 'x=" + deep_array(60000) + "'");  // < 128 KiB: one argv string
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "--var 'x': JSON nesting deeper");
  r = test::run_lfm("template -m " + d.str() + " --messages " + msgs);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "hi");
}

TEST(HostileTokenizer, MegabyteAddedTokenNeitherOverflowsNorIsAccepted) {
  // The matcher itself: one trie level per byte, freed without recursion.
  AddedToken big;
  big.id = 5;
  big.content = std::string(1 << 20, 'x');
  {
    tok::AddedTokenMatcher m({big});
    std::vector<tok::TextSegment> out;
    m.split("a" + big.content + "b", out);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[1].token_id, 5);
  }
  // Through tokenizer.json: refused with the limit, never a crash.
  json j = test::minimal_tokenizer_json();
  j["added_tokens"].push_back({{"id", 5}, {"content", big.content}, {"special", true}});
  EXPECT_HAS(error_of([&] { Tokenizer t(parse_tokenizer_json(j)); }), "beyond lfm's limit of 65536");
}

// ---- sizes at integer limits ------------------------------------------------------------------

json base_config() {
  return json::parse(R"({"model_type": "lfm2", "vocab_size": 65536, "hidden_size": 2048, "num_hidden_layers": 16,
      "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12288,
      "layer_types": ["conv","conv","full_attention","conv","conv","full_attention","conv","conv","full_attention",
                      "conv","full_attention","conv","full_attention","conv","full_attention","conv"]})");
}

std::string config_error(const std::string& key, const json& value, bool moe = false) {
  json j = base_config();
  if (moe) {
    j["model_type"] = "lfm2_moe";
    j["num_experts"] = 32;
  }
  j[key] = value;
  return error_of([&] { parse_model_config(j); });
}

TEST(HostileConfig, BaseConfigIsValid) { EXPECT_EQ(parse_model_config(base_config()).ffn_dim, 8192); }

TEST(HostileConfig, HugeSizesAreRefusedBeforeArithmetic) {
  const json huge = int64_t(1) << 62;
  EXPECT_HAS(config_error("hidden_size", huge), "'hidden_size' = 4611686018427387904 exceeds lfm's limit of 65536");
  EXPECT_HAS(config_error("num_hidden_layers", 1000000000), "'num_hidden_layers' = 1000000000 exceeds");
  EXPECT_HAS(config_error("head_dim", huge), "'head_dim' = 4611686018427387904 exceeds");
  EXPECT_HAS(config_error("intermediate_size", huge), "'intermediate_size' = 4611686018427387904 exceeds");
  EXPECT_HAS(config_error("block_multiple_of", huge), "block_multiple_of 4611686018427387904 exceeds");
  EXPECT_HAS(config_error("block_ffn_dim_multiplier", 1e300), "block_ffn_dim_multiplier");
  EXPECT_HAS(config_error("num_experts", huge, true), "'num_experts' = 4611686018427387904 exceeds");
  EXPECT_HAS(config_error("moe_intermediate_size", huge, true), "'moe_intermediate_size' = 4611686018427387904");
  EXPECT_HAS(config_error("max_position_embeddings", huge), "'max_position_embeddings' = 4611686018427387904 is outside");
  EXPECT_HAS(config_error("conv_L_cache", huge), "'conv_L_cache' = 4611686018427387904 exceeds");
  EXPECT_HAS(config_error("vocab_size", huge), "'vocab_size' = 4611686018427387904 exceeds");
}

TEST(HostileConfig, NumbersBeyondInt64AreNamedNotWrapped) {
  // 2^64 - 1 used to read as -1 ("must be positive, got -1").
  const std::string msg = config_error("hidden_size", json(uint64_t(18446744073709551615ull)));
  EXPECT_HAS(msg, "'hidden_size' = 18446744073709551615 is too large");
  EXPECT_HAS(config_error("num_hidden_layers", 1e300), "'num_hidden_layers' = 1e+300 is too large");
}

TEST(HostileConfig, PresentButNullKeyIsNotCalledMissing) {
  EXPECT_HAS(config_error("hidden_size", nullptr), "required key 'hidden_size' is null");
  json j = base_config();
  j.erase("hidden_size");
  EXPECT_HAS(error_of([&] { parse_model_config(j); }), "missing required key 'hidden_size'");
}

TEST(HostileConfig, TokenIdsAreNotCutTo32Bits) {
  // 2^40 + 2 would have become id 2.
  EXPECT_HAS(config_error("bos_token_id", int64_t(1) << 40), "'bos_token_id' = 1099511627776 is outside [-1, 4194303]");
  EXPECT_HAS(config_error("eos_token_id", json::array({int64_t(1) << 40})), "'eos_token_id' entries must be integers");
  EXPECT_HAS(config_error("pad_token_id", -2), "'pad_token_id' = -2 is outside");
  EXPECT_EQ(parse_model_config([] { json j = base_config(); j["pad_token_id"] = -1; return j; }()).pad_token_id, -1);
}

TEST(HostileConfig, ErrorsNameTheFile) {
  test::TempDir d;
  json j = base_config();
  j["hidden_size"] = int64_t(1) << 62;
  const std::string path = d.write("config.json", j.dump());
  EXPECT_HAS(error_of([&] { load_model_config(path); }), "(in '" + path + "')");
}

// GGUF metadata with a billion layers / a 2^62 hidden size: refused before per-layer tables exist.
std::string gguf_with(const test::TempDir& d, uint64_t layers, uint64_t hidden) {
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::Value::of_string("lfm2"));
  w.set("lfm2.block_count", gguf::Value::of_u64(layers));
  w.set("lfm2.embedding_length", gguf::Value::of_u64(hidden));
  w.set("lfm2.attention.head_count", gguf::Value::of_u32(4));
  w.set("lfm2.attention.head_count_kv", gguf::Value::of_string("not a number"));
  const std::string path = (d / "m.gguf").string();
  w.begin(path);
  w.finish();
  return path;
}

TEST(HostileConfig, GgufSizesAndTypeErrorsNameTheFile) {
  test::TempDir d;
  {
    const std::string path = gguf_with(d, 1000000000, 2048);
    gguf::GgufFile f(path);
    const std::string msg = error_of([&] { gguf::config_from_gguf(f); });
    EXPECT_HAS(msg, path);
    EXPECT_HAS(msg, "lfm2.block_count = 1000000000 exceeds lfm's limit of 1024");
  }
  {
    const std::string path = gguf_with(d, 4, uint64_t(1) << 62);
    gguf::GgufFile f(path);
    EXPECT_HAS(error_of([&] { gguf::config_from_gguf(f); }), "embedding_length = 4611686018427387904 exceeds");
  }
  {
    const std::string path = gguf_with(d, 4, 2048);
    gguf::GgufFile f(path);
    const std::string msg = error_of([&] { gguf::config_from_gguf(f); });
    EXPECT_HAS(msg, "head_count_kv' must be an integer");
    EXPECT_HAS(msg, "(in '" + path + "')");
  }
}

TEST(HostileTokenizer, IdsAreBoundedBeforeTablesAreSized) {
  json j = test::minimal_tokenizer_json();
  j["model"]["vocab"]["c"] = 2147483647;  // would size the vocabulary table by 2^31 entries
  EXPECT_HAS(error_of([&] { parse_tokenizer_json(j); }), "vocab entry 'c' has invalid id 2147483647");
  j = test::minimal_tokenizer_json();
  j["added_tokens"].push_back({{"id", (int64_t(1) << 40) + 3}, {"content", "<x>"}});  // would become id 3
  EXPECT_HAS(error_of([&] { parse_tokenizer_json(j); }), "added token '<x>' has invalid id 1099511627779");
  j = test::minimal_tokenizer_json();
  j["added_tokens"].push_back({{"id", 2147483647}, {"content", "<y>"}});
  EXPECT_HAS(error_of([&] { parse_tokenizer_json(j); }), "has invalid id 2147483647");
}

TEST(HostileTokenizer, AddedTokensDecoderKeysAreParsedStrictly) {
  for (const char* key : {"12abc", "99999999999", "-1", ""}) {
    TokenizerSpec spec = parse_tokenizer_json(test::minimal_tokenizer_json());
    json cfg = {{"added_tokens_decoder", {{key, {{"content", "<z>"}}}}}};
    const std::string msg = error_of([&] { apply_tokenizer_config(spec, cfg); });
    EXPECT_HAS(msg, "added_tokens_decoder key");
    EXPECT_EQ(msg.find("stoi"), std::string::npos) << msg;
  }
  TokenizerSpec spec = parse_tokenizer_json(test::minimal_tokenizer_json());
  json cfg = {{"added_tokens_decoder", {{"5000000", {{"content", "<z>"}}}}}};
  EXPECT_HAS(error_of([&] { apply_tokenizer_config(spec, cfg); }), "tokenizer_config.json: added token '<z>' has invalid id");
}

// ---- messages ---------------------------------------------------------------------------------

TEST(HostileMessages, CliRangeErrorsAreInWords) {
  auto r = test::run_lfm("generate -m /nonexistent -p hi --threads=-1");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "'-1' must be 0 or more");
  EXPECT_EQ(r.out.find("179769"), std::string::npos) << r.out;  // no 309-digit maximum
  r = test::run_lfm("generate -m /nonexistent -p hi --ctx-size=0");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "'0' must be greater than 0");
}

// ---- fuzz findings --------------------------------------------------------------------------

// Every input in fuzz/regressions/output_parser (each once crashed fuzz_output_parser) parses
// one-shot and streamed to the same result, printable with the server's replacing dump.
// The files of fuzz/regressions/TARGET (path, bytes); at least one is expected.
std::vector<std::pair<std::string, std::string>> regression_inputs(const char* target) {
  const std::filesystem::path dir = std::filesystem::path(LFM_SOURCE_DIR) / "fuzz/regressions" / target;
  std::vector<std::pair<std::string, std::string>> inputs;
  if (std::filesystem::is_directory(dir))
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      inputs.emplace_back(entry.path().string(), test::read_file(entry.path()));
  EXPECT_FALSE(inputs.empty()) << "no inputs in " << dir;
  return inputs;
}

TEST(FuzzRegressions, OutputParserInputs) {
  for (const auto& [path, bytes] : regression_inputs("output_parser")) {
    ASSERT_FALSE(bytes.empty()) << path;
    const std::string_view text = std::string_view(bytes).substr(1);  // byte 0: the harness's chunk size
    const size_t chunk = 1 + static_cast<unsigned char>(bytes[0]) % 7;
    const chat::ParsedOutput whole = chat::parse_assistant_output(text);
    chat::StreamingOutputParser stream;
    chat::ParsedOutput pieces;
    for (size_t i = 0; i < text.size(); i += chunk) chat::append_events(pieces, stream.feed(text.substr(i, chunk)));
    chat::append_events(pieces, stream.finish());
    auto dump = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
    EXPECT_EQ(pieces.content, whole.content) << path;
    EXPECT_EQ(dump(pieces.tool_calls), dump(whole.tool_calls)) << path;
  }
}

// Every input in fuzz/regressions/tokenizer (tokenizer.json, NUL, tokenizer_config.json) is
// accepted or refused with an lfm::Error; nothing else escapes (a number overflow once did).
TEST(FuzzRegressions, TokenizerInputs) {
  for (const auto& [path, bytes] : regression_inputs("tokenizer")) {
    const size_t nul = bytes.find('\0');
    try {
      TokenizerSpec spec = parse_tokenizer_json_text(bytes.substr(0, nul));
      if (nul != std::string::npos) apply_tokenizer_config(spec, parse_json(bytes.substr(nul + 1), "config"));
      Tokenizer t(std::move(spec));
    } catch (const Error&) {
    }
  }
  EXPECT_HAS(error_of([] { parse_tokenizer_json_text(R"({"model": 13851e308})"); }), "tokenizer.json: invalid JSON");
  test::TempDir d;
  d.write("tokenizer.json", test::minimal_tokenizer_json().dump());
  d.write("tokenizer_config.json", R"({"x": 1e999})");
  EXPECT_HAS(error_of([&] { load_tokenizer_spec(d.str()); }), "tokenizer_config.json: invalid JSON");
}

// ---- threads ----------------------------------------------------------------------------------

TEST(HostileThreads, PoolRunsWithTheThreadsItGot) {
  int started = 0;
  ThreadPool pool(6, [&](std::function<void()> body) {
    if (started == 2) throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    ++started;
    return std::thread(std::move(body));
  });
  EXPECT_EQ(pool.size(), 3);
  std::vector<std::atomic<int>> hits(1000);
  for (int rep = 0; rep < 50; ++rep) pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 50);
}

TEST(HostileThreads, NoThreadAtAllStillWorks) {
  ThreadPool pool(4, [](std::function<void()>) -> std::thread {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
  });
  EXPECT_EQ(pool.size(), 1);
  int64_t sum = 0;
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum, 10);
  // A spawner that hands back no thread is not counted as a worker (run() would wait for it).
  ThreadPool empty(4, [](std::function<void()>) { return std::thread(); });
  EXPECT_EQ(empty.size(), 1);
}

TEST(HostileThreads, OtherSpawnErrorsPropagateAfterJoiningWorkers) {
  int started = 0;
  EXPECT_THROW(ThreadPool(4,
                          [&](std::function<void()> body) {
                            if (started == 1) throw std::runtime_error("spawner broke");
                            ++started;
                            return std::thread(std::move(body));
                          }),
               std::runtime_error);
  EXPECT_EQ(started, 1);  // the started worker was joined (no terminate, no hang)
}

}  // namespace
}  // namespace lfm
