// The `lfm` executable end to end: subcommands, JSON output, exit codes and usage on bad input.
#include <gtest/gtest.h>


#include "test_util.h"

namespace lfm {
namespace {

test::RunResult run(const std::string& args, bool merge_stderr = true) {
  return test::run_lfm(args, merge_stderr ? test::Stderr::kMerge : test::Stderr::kDiscard);
}

const std::string kFixtureA = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32");

TEST(CliTest, InfoOnConfigOnlyFolderOfLfm2_1_2B) {
  const auto r = run("info -m " + test::data_dir() + "/assets/lfm2/LFM2-1.2B --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layer_pattern"], "ccAccAccAcAcAcAc");
  EXPECT_EQ(j["config"]["ffn_dim"], 8192);
  EXPECT_EQ(j["kv_cache_bytes_per_token"], 12288);
  EXPECT_EQ(j["conv_state_bytes_per_sequence"], 10 * 2 * 2048 * 2);
  EXPECT_EQ(j["parameters"], 1170340608);  // the released checkpoint's count
  const auto text = run("info -m " + test::data_dir() + "/assets/lfm2/LFM2-1.2B");
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("ccAccAccAcAcAcAc"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("12288 bytes/token"), std::string::npos) << text.out;
}

TEST(CliTest, InfoOnFixtureCountsRealTensors) {
  const auto r = run("info -m " + kFixtureA + " --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  int64_t params = 0;
  const auto ref = test::reference("lfm2_a_fullattnidxs_tied_f32");
  for (const auto& t : ref["checkpoint_tensors"]) {
    int64_t n = 1;
    for (const auto& d : t[1]) n *= d.get<int64_t>();
    params += n;
  }
  EXPECT_EQ(j["parameters"], params);
  EXPECT_EQ(j["layer_pattern"], "cAccAc");
}

TEST(CliTest, GenerateGreedyJsonMatchesFixture) {
  const auto ref = test::reference("lfm2_c_layertypes_untied_convbias_f32");
  const auto& g = ref["greedy"]["runs"][0];
  std::string ids;
  for (const auto& v : g["prompt"]) ids += (ids.empty() ? "" : ",") + std::to_string(v.get<int>());
  const auto r = run("generate -m " + test::fixture_dir("lfm2_c_layertypes_untied_convbias_f32") + " --prompt-ids " +
                         ids + " -n 32 --ignore-eos --json",
                     false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], g["prompt"]);
  EXPECT_EQ(j["generated_ids"], g["new_tokens"]);
}

// --draft ngram: the same greedy tokens, with drafts verified (and some accepted on a prompt the
// model continues repetitively), at block sizes 1 and 16.
TEST(CliTest, DraftingKeepsGreedyTokens) {
  const std::string model = test::fixture_dir("lfm2moe_g_untied_nobias_scaled_f32");
  const std::string prompt = " --prompt-ids 5,9,13,7,7,1,5,9,13,7,7,1,5,9,13 -n 40 --ignore-eos --json";
  const auto plain = run("generate -m " + model + prompt, false);
  ASSERT_EQ(plain.code, 0) << plain.out;
  const auto want = nlohmann::json::parse(plain.out)["generated_ids"];
  for (const char* block : {"1", "16"}) {
    const auto spec = run("generate -m " + model + prompt + " --draft ngram --draft-max 4 --kv-block-size " + block, false);
    ASSERT_EQ(spec.code, 0) << spec.out;
    const auto j = nlohmann::json::parse(spec.out);
    EXPECT_EQ(j["generated_ids"], want) << "block size " << block;
    EXPECT_GT(j["drafted_tokens"].get<int64_t>(), 0);
    EXPECT_LE(j["accepted_tokens"].get<int64_t>(), j["drafted_tokens"].get<int64_t>());
  }
  // A draft model: the model itself (every draft accepted) and another with the same vocabulary,
  // with other cache types.
  const std::string other = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32");
  for (const auto& [kv, draft] : std::vector<std::pair<std::string, std::string>>{
           {"", " --draft-model " + model},
           {" --kv-type bf16", " --draft model --draft-model " + other},
           {" --kv-block-size 1 --kv-type f32", " --draft-model " + other}}) {
    const auto ref = run("generate -m " + model + prompt + kv, false);
    const auto spec = run("generate -m " + model + prompt + kv + " --draft-max 4" + draft, false);
    ASSERT_EQ(spec.code, 0) << draft << ": " << spec.out;
    const auto j = nlohmann::json::parse(spec.out);
    EXPECT_EQ(j["generated_ids"], nlohmann::json::parse(ref.out)["generated_ids"]) << kv << draft;
    EXPECT_GT(j["drafted_tokens"].get<int64_t>(), 0) << draft;
    if (kv.empty()) {
      EXPECT_EQ(j["accepted_tokens"], j["drafted_tokens"]);  // the model drafting for itself
    }
  }
  const auto bad = run("generate -m " + model + prompt + " --draft model");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--draft-model"), std::string::npos) << bad.out;
  const auto contradict = run("generate -m " + model + prompt + " --draft ngram --draft-model " + model);
  EXPECT_NE(contradict.code, 0);
  EXPECT_NE(contradict.out.find("--draft-model is given"), std::string::npos) << contradict.out;
  const auto missing = run("generate -m " + model + prompt + " --draft-model /nonexistent/draft");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.out.find("/nonexistent/draft"), std::string::npos) << missing.out;
}

TEST(CliTest, StateOptionsKeepResultsAndInfoReportsThePool) {
  const std::string fx = test::fixture_dir("lfm2_c_layertypes_untied_convbias_f32");
  const auto ref = test::reference("lfm2_c_layertypes_untied_convbias_f32");
  const auto& g = ref["greedy"]["runs"][1];
  std::string ids;
  for (const auto& v : g["prompt"]) ids += (ids.empty() ? "" : ",") + std::to_string(v.get<int>());
  // Other block sizes, a tiny step budget and parallel slots change nothing.
  for (const std::string extra : {" --kv-block-size 1", " --kv-block-size 256 --batch-tokens 3",
                                  " --kv-type f32 --parallel 4 --no-prefix-cache", " --itl-target-ms 0.01",
                                  " --itl-target-ms 0 --prefill-chunk 2"}) {
    const auto r = run("generate -m " + fx + " --prompt-ids " + ids + " -n 32 --ignore-eos --json" + extra, false);
    ASSERT_EQ(r.code, 0) << extra << ": " << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["generated_ids"], g["new_tokens"]) << extra;
  }
  const auto a = run("logits -m " + fx + " --ids " + ids + " --json --kv-block-size 1", false);
  const auto b = run("logits -m " + fx + " --ids " + ids + " --json --kv-block-size 7", false);
  const auto h = run("logits -m " + fx + " --ids " + ids + " --json --kv-type bf16", false);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, h.out);
  const auto target = run("generate -m " + fx + " --prompt-ids 1,2 -n 2 --itl-target-ms -5");
  EXPECT_NE(target.code, 0);
  EXPECT_NE(target.out.find("--itl-target-ms: '-5' must be 0 or more"), std::string::npos) << target.out;
  const auto bad = run("logits -m " + fx + " --ids 1,2 --kv-type q8_0");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("unknown cache type 'q8_0'"), std::string::npos) << bad.out;
  // LFM2-1.2B: the whole 128K context in 1.5 GiB of bf16 KV plus one conv slot.
  const std::string cfg = test::data_dir() + "/assets/lfm2/LFM2-1.2B";
  const auto info = run("info -m " + cfg + " --ctx-size 131072 --no-prefix-cache --json", false);
  ASSERT_EQ(info.code, 0) << info.out;
  const auto pool = nlohmann::json::parse(info.out)["state_pool"];
  EXPECT_EQ(pool["kv_bytes"], int64_t{3} << 29);
  EXPECT_EQ(pool["conv_slot_bytes"], 81920);
  EXPECT_EQ(pool["total_bytes"], (int64_t{3} << 29) + 81920);
  const auto f32 = nlohmann::json::parse(run("info -m " + cfg + " --kv-type f32 --json", false).out);
  EXPECT_EQ(f32["kv_cache_bytes_per_token"], 24576);
  const auto mem = run("info -m " + cfg + " --ctx-size 8192 --kv-memory 10M");
  EXPECT_NE(mem.code, 0);
  EXPECT_NE(mem.out.find("fewer than one sequence of 8192 tokens needs"), std::string::npos) << mem.out;
}

TEST(CliTest, ForcedPortablePathGivesTheSameTokens) {
  // LFM_ISA lowers the kernels to the portable reference path: what a CPU without AVX2 runs.
  const std::string fx = test::fixture_dir("lfm2_c_layertypes_untied_convbias_f32");
  const auto ref = test::reference("lfm2_c_layertypes_untied_convbias_f32");
  const auto& g = ref["greedy"]["runs"][2];
  std::string ids;
  for (const auto& v : g["prompt"]) ids += (ids.empty() ? "" : ",") + std::to_string(v.get<int>());
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    const auto r = test::run_command(std::string("env LFM_ISA=") + isa + " " + LFM_BINARY + " generate -m " + fx +
                                     " --prompt-ids " + ids + " -n 32 --ignore-eos --json 2>/dev/null");
    ASSERT_EQ(r.code, 0) << isa << ": " << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["generated_ids"], g["new_tokens"]) << isa;
  }
  const auto bench =
      test::run_command(std::string("env LFM_ISA=generic ") + LFM_BINARY + " bench -m " + fx + " -p 8 -n 2 -r 1 -o json 2>/dev/null");
  ASSERT_EQ(bench.code, 0) << bench.out;
  EXPECT_EQ(nlohmann::json::parse(bench.out)[0]["cpu_info"], "cpu-reference");
  const auto bad = test::run_command(std::string("env LFM_ISA=sse9 ") + LFM_BINARY + " generate -m " + fx + " --prompt-ids 1 2>&1");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("LFM_ISA='sse9'"), std::string::npos) << bad.out;
}

TEST(CliTest, LogitsPrefillThenDecodeJson) {
  const auto ref = test::reference("lfm2_a_fullattnidxs_tied_f32");
  const auto& pd = ref["prefill_decode"];
  std::string ids;
  for (const auto& v : pd["input_ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(v.get<int>());
  const auto r = run("logits -m " + kFixtureA + " --ids " + ids + " --prefill " +
                         std::to_string(pd["n_prefill"].get<int>()) + " --json",
                     false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto got = nlohmann::json::parse(r.out)["logits"].get<std::vector<std::vector<double>>>();
  const auto want = pd["logits"].get<std::vector<std::vector<double>>>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t p = 0; p < got.size(); ++p)
    for (size_t v = 0; v < got[p].size(); ++v) ASSERT_NEAR(got[p][v], want[p][v], 1e-4) << p << "," << v;
}

// --bf16-activations reaches the model (logits move by the rounding, within its bound; see
// fixture_test.cpp) and bench reports it.
TEST(CliTest, Bf16ActivationsFlag) {
  const std::string fx = test::fixture_dir("lfm2_d_fullattnidxs_tied_bf16");
  const auto ref = test::reference("lfm2_d_fullattnidxs_tied_bf16");
  std::string ids;
  for (const auto& v : ref["full_forward"]["input_ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(v.get<int>());
  const auto want = ref["full_forward"]["logits"].get<std::vector<std::vector<double>>>();
  for (const bool flag : {false, true}) {
    const auto r = test::run_command(std::string(LFM_BINARY) + " logits -m " + fx + " --ids " + ids + " --kv-type f32 --json" +
                                     (flag ? " --bf16-activations" : "") + " 2>/dev/null");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto got = nlohmann::json::parse(r.out)["logits"].get<std::vector<std::vector<double>>>();
    ASSERT_EQ(got.size(), want.size());
    double d = 0;
    for (size_t p = 0; p < got.size(); ++p) d = std::max(d, test::max_abs_diff(std::span<const double>(got[p]), std::span<const double>(want[p])));
    if (flag) {
      EXPECT_GT(d, 1e-3);
      EXPECT_LT(d, 0.5);
    } else {
      EXPECT_LT(d, 1e-4);
    }
  }
  const auto bench = test::run_command(std::string(LFM_BINARY) + " bench -m " + fx +
                                       " -p 8 -n 2 -r 1 -o json --bf16-activations 2>/dev/null");
  ASSERT_EQ(bench.code, 0) << bench.out;
  EXPECT_EQ(nlohmann::json::parse(bench.out)[0]["bf16_activations"], true);
}

// lfm bench speaks llama-bench: one JSON row per test × thread count with its field names, plus
// ours; each tg row carries the read ceiling measured beside each of its repetitions.
TEST(CliTest, BenchJsonRowsLikeLlamaBench) {
  const auto r = run("bench -m " + kFixtureA + " -p 8 -n 3 -d 0,5 -t 1,2 -r 2 -o json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 8u);  // threads {1, 2} × depths {0, 5} × {pp8, tg3}
  int tg = 0;
  for (const auto& j : rows) {
    for (const char* f : {"model_filename", "model_type", "model_size", "model_n_params", "backends", "cpu_info",
                          "n_threads", "type_k", "type_v", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns",
                          "avg_ts", "stddev_ts", "samples_ns", "samples_ts", "read_gb_per_s", "ceiling_gb_per_s"})
      EXPECT_TRUE(j.contains(f)) << f << " in " << j.dump();
    EXPECT_EQ(j["samples_ts"].size(), 2u);
    EXPECT_GT(j["avg_ts"].get<double>(), 0);
    EXPECT_GT(j["ceiling_gb_per_s"].get<double>(), 0);
    EXPECT_TRUE(j["n_depth"] == 0 || j["n_depth"] == 5) << j.dump();
    if (j["n_gen"] == 3) {
      ++tg;
      EXPECT_EQ(j["n_prompt"], 0);
      EXPECT_GT(j["read_gb_per_s"].get<double>(), 0);
      const auto cs = j["ceiling_samples_gb_per_s"].get<std::vector<double>>();
      ASSERT_EQ(cs.size(), 2u);  // one per repetition
      EXPECT_NEAR(j["ceiling_gb_per_s"].get<double>(), (cs[0] + cs[1]) / 2, 1e-9);
    } else {
      EXPECT_EQ(j["n_prompt"], 8);
      EXPECT_EQ(j["read_gb_per_s"], 0);
      EXPECT_TRUE(j["ceiling_samples_gb_per_s"].empty());
    }
  }
  EXPECT_EQ(tg, 4);
  const auto md = run("bench -m " + kFixtureA + " -p 8 -n 3 -r 1", false);
  ASSERT_EQ(md.code, 0) << md.out;
  EXPECT_NE(md.out.find("| test | t/s | GB/s (ceiling) |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| pp8 |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| tg3 |"), std::string::npos) << md.out;
  EXPECT_EQ(rows[0]["sampling"], "greedy");
  // Sampled decode, from the candidates and from whole rows; bad sampling settings are refused.
  for (const char* from : {"candidates", "rows"}) {
    const auto s = run(std::string("bench -m ") + kFixtureA + " -p 0 -n 3 -r 1 --temperature 0.8 --top-p 0.9 --sample-from " +
                       from + " -o json", false);
    ASSERT_EQ(s.code, 0) << s.out;
    const auto j = nlohmann::json::parse(s.out)[0];
    EXPECT_EQ(j["sampling"], std::string("temp 0.8 top_k 0 top_p 0.9 from ") + from) << j.dump();
    EXPECT_GT(j["avg_ts"].get<double>(), 0);
  }
  const auto sampled_md = run("bench -m " + kFixtureA + " -p 0 -n 3 -r 1 --temp 1", false);
  EXPECT_NE(sampled_md.out.find("| tg3 sampled |"), std::string::npos) << sampled_md.out;
  const auto bad = run("bench -m " + kFixtureA + " -p 0 -n 3 -r 1 --temp 1 --top-p 0");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("top_p"), std::string::npos) << bad.out;
}

TEST(CliTest, HelpAndBadArguments) {
  const auto top = run("--help");
  EXPECT_EQ(top.code, 0);
  // The precision policy in one paragraph, pointing at README.md's section.
  for (const char* s : {"Precision:", "float32 activations", "--bf16-activations", "--kv-type", "README.md, section"})
    EXPECT_NE(top.out.find(s), std::string::npos) << s << ": " << top.out;
  for (const char* cmd : {"generate", "logits", "info", "serve", "bench", "chat"}) {
    const auto h = run(std::string(cmd) + " --help");
    EXPECT_EQ(h.code, 0) << cmd;
    EXPECT_NE(h.out.find("--model"), std::string::npos) << cmd << ": " << h.out;
    if (std::string(cmd) != "info") {
      EXPECT_NE(h.out.find("rounded once to bf16"), std::string::npos) << cmd << ": --bf16-activations says what it does";
    }
  }
  const auto none = run("");
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.out.find("usage: lfm <command>"), std::string::npos);
  const auto unknown = run("frobnicate");
  EXPECT_NE(unknown.code, 0);
  EXPECT_NE(unknown.out.find("unknown command 'frobnicate'"), std::string::npos);
  const auto missing = run("generate --prompt-ids 1,2");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.out.find("--model"), std::string::npos) << missing.out;  // usage printed
  const auto bad_ids = run("generate -m " + kFixtureA + " --prompt-ids 1,x,3");
  EXPECT_NE(bad_ids.code, 0);
  EXPECT_NE(bad_ids.out.find("'x' is not a token id"), std::string::npos) << bad_ids.out;
  const auto oov = run("generate -m " + kFixtureA + " --prompt-ids 1,999");
  EXPECT_NE(oov.code, 0);
  EXPECT_NE(oov.out.find("token id 999 is outside the vocabulary"), std::string::npos) << oov.out;
  const auto overflow = run("generate -m " + kFixtureA + " --prompt-ids 1,2,3,4 -c 3");
  EXPECT_NE(overflow.code, 0);
  EXPECT_NE(overflow.out.find("past the context size 3"), std::string::npos) << overflow.out;
  const auto no_model = run("info -m /nonexistent/model");
  EXPECT_NE(no_model.code, 0);
  EXPECT_NE(no_model.out.find("/nonexistent/model"), std::string::npos) << no_model.out;
  const auto prefill = run("logits -m " + kFixtureA + " --ids 1,2 --prefill 5");
  EXPECT_NE(prefill.code, 0);
  EXPECT_NE(prefill.out.find("--prefill 5 exceeds"), std::string::npos) << prefill.out;
}

}  // namespace
}  // namespace lfm
