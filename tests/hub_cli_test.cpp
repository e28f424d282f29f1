// `lfm` against a fake Hub on loopback (tests/fake_hub.h) with HF_ENDPOINT pointing at it and a
// temporary HF_HUB_CACHE: `generate -m owner/name` gives exactly what the local folder gives, every
// command that takes -m takes a reference (serve included), pull / models list / models rm, and
// the errors users see. Nothing here reaches the internet.
#include <gtest/gtest.h>

#include <httplib.h>
#include <signal.h>

#include <filesystem>

#include "fake_hub.h"
#include "model_test_util.h"
#include "subprocess.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

const std::string kCommit = "fedcba9876543210fedcba9876543210fedcba98";

// The result of `generate --json` without its timings.
nlohmann::json result(const test::RunResult& r) {
  if (r.code != 0) return {{"exit code", r.code}, {"output", r.out}};
  nlohmann::json j = nlohmann::json::parse(r.out);
  return {{"prompt_ids", j["prompt_ids"]}, {"generated_ids", j["generated_ids"]}, {"text", j["text"]}};
}

class HubCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new test::TempDir("lfm_hubcli_model");
    test::write_text_model(model_->str());
  }
  static void TearDownTestSuite() { delete model_; }

  void SetUp() override {
    hub_.add_folder("acme/tiny", model_->path(), kCommit, {{"README.md", "# tiny\n"}});
    test::FakeHub::Repo gguf;
    gguf.commit = kCommit;
    gguf.files = {{"tiny-Q4_K_M.gguf", test::read_file(test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.gguf")}};
    hub_.add_repo("acme/tiny-GGUF", gguf);
    test::FakeHub::Repo gated;
    gated.commit = kCommit;
    gated.gated_token = "hf_secret";
    gated.files = {{"config.json", test::read_file(model_->path() / "config.json")},
                   {"model.safetensors", test::read_file(model_->path() / "model.safetensors")}};
    hub_.add_repo("acme/gated", gated);
  }

  // The environment of every run: this test's hub and cache, nothing of the user's.
  std::vector<std::string> env(const std::string& endpoint = "") const {
    return {"-u", "HF_TOKEN", "-u", "HUGGING_FACE_HUB_TOKEN", "-u", "HF_HUB_OFFLINE", "-u", "HF_HOME",
            "-u", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN_PATH=/nonexistent/token",
            "HF_ENDPOINT=" + (endpoint.empty() ? hub_.endpoint() : endpoint), "HF_HUB_CACHE=" + cache_.str()};
  }
  test::RunResult lfm(const std::string& args, bool merge_stderr = false, const std::string& extra_env = "",
                      const std::string& endpoint = "") const {
    std::string cmd = "env";
    for (const auto& e : env(endpoint)) cmd += " '" + e + "'";
    cmd += " " + extra_env + " " + LFM_BINARY + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
    return test::run_command(cmd);
  }
  test::RunResult lfm_local(const std::string& args) const {
    return test::run_command(std::string(LFM_BINARY) + " " + args + " 2>/dev/null");
  }

  static test::TempDir* model_;
  test::FakeHub hub_;
  test::TempDir cache_{"lfm_hubcli_cache"};
};
test::TempDir* HubCli::model_ = nullptr;

TEST_F(HubCli, GenerateByRepoNameMatchesTheLocalFolder) {
  const std::string args = " -p 'Hello world, the model says' -n 12 --ignore-eos";
  const auto local = lfm_local("generate -m " + model_->str() + args + " --json");
  ASSERT_EQ(local.code, 0) << local.out;
  const auto first = lfm("generate -m acme/tiny" + args + " --json");
  ASSERT_EQ(first.code, 0) << lfm("generate -m acme/tiny" + args, true).out;
  EXPECT_EQ(result(first), result(local));
  EXPECT_GT(hub_.count("GET", "/cdn/"), 0);
  // Again from the cache: one revision lookup, no file request.
  hub_.clear_requests();
  EXPECT_EQ(result(lfm("generate -m acme/tiny" + args + " --json")), result(local));
  EXPECT_EQ(hub_.requests().size(), 1u);
  // Offline, and with the Hub unreachable: the cache alone.
  hub_.clear_requests();
  const std::string gone = "http://127.0.0.1:" + std::to_string(test::closed_port());
  EXPECT_EQ(result(lfm("generate -m acme/tiny" + args + " --json", false, "HF_HUB_OFFLINE=1", gone)), result(local));
  const auto fallback = lfm("generate -m acme/tiny" + args, true, "", gone);
  EXPECT_EQ(fallback.code, 0) << fallback.out;
  EXPECT_NE(fallback.out.find("using the cached snapshot fedcba987654"), std::string::npos) << fallback.out;
  EXPECT_TRUE(hub_.requests().empty());
  // Pinned to the commit, streamed text.
  EXPECT_EQ(lfm("generate -m acme/tiny@" + kCommit + args).out, lfm_local("generate -m " + model_->str() + args).out);
}

TEST_F(HubCli, EveryModelCommandTakesAReference) {
  const std::string dir = model_->str();
  // info fetches config.json only.
  const auto info = lfm("info -m acme/tiny --json");
  ASSERT_EQ(info.code, 0) << lfm("info -m acme/tiny", true).out;
  EXPECT_EQ(nlohmann::json::parse(info.out)["layer_pattern"], nlohmann::json::parse(lfm_local("info -m " + dir + " --json").out)["layer_pattern"]);
  EXPECT_EQ(hub_.count("GET", "/cdn/"), 0);
  EXPECT_EQ(hub_.count("GET", "/resolve/" + kCommit + "/model.safetensors"), 0);
  // tokenize / detokenize / template fetch the tokenizer files only.
  EXPECT_EQ(lfm("tokenize -m acme/tiny 'Hello world' --json").out, lfm_local("tokenize -m " + dir + " 'Hello world' --json").out);
  EXPECT_EQ(lfm("detokenize -m acme/tiny 1,2,3").out, lfm_local("detokenize -m " + dir + " 1,2,3").out);
  const std::string messages = test::data_dir() + "/chat/example_messages.json";
  const auto tpl = lfm("template -m acme/tiny --messages " + messages + " --date 2025-01-01");
  ASSERT_EQ(tpl.code, 0) << lfm("template -m acme/tiny --messages " + messages, true).out;
  EXPECT_EQ(tpl.out, lfm_local("template -m " + dir + " --messages " + messages + " --date 2025-01-01").out);
  EXPECT_EQ(hub_.count("GET", "/cdn/"), 2);  // tokenizer.json and tokenizer_config.json (LFS-sized)
  // The weights: logits, bench, convert, chat.
  EXPECT_EQ(lfm("logits -m acme/tiny --ids 1,2,3 --json").out, lfm_local("logits -m " + dir + " --ids 1,2,3 --json").out);
  const auto bench = lfm("bench -m acme/tiny -p 4 -n 2 -r 1 -t 1 -o json");
  EXPECT_EQ(bench.code, 0) << bench.out;
  const test::TempDir out("lfm_hubcli_out");
  const auto conv = lfm("convert -m acme/tiny -o " + out.str() + "/t.gguf --type f32 -q", true);
  ASSERT_EQ(conv.code, 0) << conv.out;
  EXPECT_EQ(lfm_local("logits -m " + out.str() + "/t.gguf --ids 1,2,3 --json").code, 0);
  const auto chat = lfm("chat -m acme/tiny -n 3 < " + out.write("in.txt", "Hi\n/exit\n"), true, "HF_HUB_OFFLINE=1");
  EXPECT_EQ(chat.code, 0) << chat.out;
  // A GGUF by quant.
  const auto g = lfm("info -m acme/tiny-GGUF:Q4_K_M --json");
  ASSERT_EQ(g.code, 0) << lfm("info -m acme/tiny-GGUF:Q4_K_M", true).out;
  EXPECT_EQ(nlohmann::json::parse(g.out)["layer_pattern"],
            nlohmann::json::parse(lfm_local("info -m " + test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.gguf --json").out)["layer_pattern"]);
}

TEST_F(HubCli, ServeTakesAReference) {
  const test::TempDir log("lfm_hubcli_serve");
  std::vector<std::string> argv = {"/usr/bin/env"};
  for (const auto& e : env()) argv.push_back(e);
  for (const char* a : {LFM_BINARY, "serve", "-m", "acme/tiny", "--port", "0", "-t", "1"}) argv.push_back(a);
  test::Subprocess proc(argv, log.str() + "/stderr.txt");
  std::string line;
  int port = 0;
  while (proc.read_line(line))
    if (line.rfind("listening on http://127.0.0.1:", 0) == 0) {
      port = std::stoi(line.substr(line.rfind(':') + 1));
      break;
    }
  ASSERT_GT(port, 0) << test::read_file(log.path() / "stderr.txt");
  httplib::Client c("127.0.0.1", port);
  const auto res = c.Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(nlohmann::json::parse(res->body)["data"][0]["id"], "tiny");  // named after the repository
  proc.signal(SIGTERM);
  EXPECT_EQ(proc.wait(), 0);
}

TEST_F(HubCli, PullThenListAndRemove) {
  EXPECT_NE(lfm("models list").out.find("no models in " + cache_.str()), std::string::npos);
  const auto pull = lfm("pull acme/tiny");
  ASSERT_EQ(pull.code, 0) << lfm("pull acme/tiny", true).out;
  const std::string path = pull.out.substr(0, pull.out.find('\n'));
  EXPECT_EQ(path, cache_.str() + "/models--acme--tiny/snapshots/" + kCommit);
  EXPECT_TRUE(fs::exists(fs::path(path) / "model.safetensors"));
  const auto again = nlohmann::json::parse(lfm("pull acme/tiny --json").out);
  EXPECT_EQ(again["downloaded"], 0);
  EXPECT_EQ(again["path"], path);
  const auto gguf = lfm("pull acme/tiny-GGUF");
  EXPECT_EQ(gguf.out, cache_.str() + "/models--acme--tiny-GGUF/snapshots/" + kCommit + "/tiny-Q4_K_M.gguf\n");

  const auto list = lfm("models list");
  EXPECT_NE(list.out.find("acme/tiny "), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("fedcba987654 (main)"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("2 models"), std::string::npos) << list.out;
  const auto j = nlohmann::json::parse(lfm("models list --json").out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["repo"], "acme/tiny");
  EXPECT_GT(j[0]["bytes"].get<uint64_t>(), fs::file_size(model_->path() / "model.safetensors"));
  EXPECT_EQ(j[0]["revisions"][0]["refs"], nlohmann::json::array({"main"}));
  EXPECT_GT(j[0]["last_used"].get<int64_t>(), 0);

  const auto rm = lfm("models rm acme/tiny");
  EXPECT_EQ(rm.code, 0);
  EXPECT_NE(rm.out.find("removed acme/tiny: "), std::string::npos) << rm.out;
  EXPECT_FALSE(fs::exists(cache_.path() / "models--acme--tiny"));
  const auto rm_rev = lfm("models rm acme/tiny-GGUF@main");
  EXPECT_NE(rm_rev.out.find("removed acme/tiny-GGUF@fedcba987654"), std::string::npos) << rm_rev.out;
  EXPECT_NE(lfm("models list").out.find("acme/tiny-GGUF"), std::string::npos);  // the folder remains, empty
  const auto missing = lfm("models rm acme/never", true);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("'acme/never' is not in the cache"), std::string::npos) << missing.out;
}

TEST_F(HubCli, ErrorsSayWhatToDo) {
  auto r = lfm("generate -m acme/gated -p hi", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("HTTP 401"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("set HF_TOKEN"), std::string::npos) << r.out;
  EXPECT_EQ(lfm("info -m acme/gated --json", false, "HF_TOKEN=hf_secret").code, 0);
  r = lfm("generate -m acme/missing -p hi", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("'acme/missing' was not found"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no local path 'acme/missing'"), std::string::npos) << r.out;
  r = lfm("generate -m acme/tiny -p hi", true, "", "http://127.0.0.1:" + std::to_string(test::closed_port()));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("cannot reach"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HF_HUB_OFFLINE=1"), std::string::npos) << r.out;
  r = lfm("pull acme/tiny", true, "HF_HUB_OFFLINE=1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("HF_HUB_OFFLINE is set and 'acme/tiny' is not in the cache"), std::string::npos) << r.out;
  r = lfm("pull acme/tiny-GGUF:Q9_9", true);
  EXPECT_NE(r.out.find("no GGUF file for quant 'Q9_9'; available: Q4_K_M"), std::string::npos) << r.out;
  r = lfm("pull ./local/folder", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("is a path"), std::string::npos) << r.out;
  EXPECT_EQ(lfm("models").code, 2);
  EXPECT_EQ(lfm("models rm acme/tiny:Q4_K_M").code, 1);
  // A missing local path is still reported by the loader, without asking the Hub.
  hub_.clear_requests();
  r = lfm("generate -m /nonexistent/model -p hi", true);
  EXPECT_NE(r.out.find("'/nonexistent/model' does not exist"), std::string::npos) << r.out;
  EXPECT_TRUE(hub_.requests().empty());
}

}  // namespace
}  // namespace lfm
