// What a newcomer meets in the first hour (issue 56): the bundled text model answers in text,
// `lfm --version` and the help examples, output that names what it measures, and a second
// `lfm serve` on a port already taken is refused instead of silently sharing it.
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "server_test_util.h"
#include "subprocess.h"
#include "test_util.h"

namespace lfm {
namespace {

std::string tiny_model() { return std::string(LFM_SOURCE_DIR) + "/models/tiny-lfm2"; }

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(FirstHour, BundledModelGeneratesAndChatsInText) {
  const auto gen = test::run_lfm("generate -m " + tiny_model() + " -p 'The capital of France is' -n 12 --ignore-eos --json",
                                 test::Stderr::kDiscard);
  ASSERT_EQ(gen.code, 0) << gen.out;
  const auto j = nlohmann::json::parse(gen.out);
  EXPECT_EQ(j["generated_ids"].size(), 12u);
  EXPECT_FALSE(j["text"].get<std::string>().empty()) << "the tokenizer decodes the tokens into text";
  const std::string turn = "Hello! Who are you?\n";
  const auto chat = test::run_lfm("chat -m " + tiny_model() + " -n 8", test::Stderr::kMerge, &turn);
  ASSERT_EQ(chat.code, 0) << chat.out;
  EXPECT_FALSE(has(chat.out, "error")) << chat.out;
}

TEST(FirstHour, VersionNamesCommitAndBackends) {
  const auto v = test::run_lfm("--version");
  ASSERT_EQ(v.code, 0) << v.out;
  EXPECT_TRUE(v.out.starts_with("lfm 0.")) << v.out;
  EXPECT_TRUE(has(v.out, "(commit ")) << v.out;
  EXPECT_TRUE(has(v.out, "backend cpu: ")) << v.out;
  EXPECT_TRUE(has(v.out, "backend cuda: ")) << v.out;
  EXPECT_TRUE(has(v.out, "this CPU: ")) << v.out;
}

TEST(FirstHour, HelpEndsWithExamples) {
  const auto top = test::run_lfm("--help");
  ASSERT_EQ(top.code, 0);
  const size_t at = top.out.find("Examples:");
  ASSERT_NE(at, std::string::npos) << top.out;
  for (const char* want : {"-m LiquidAI/LFM2-1.2B", ".gguf", "models/tiny-lfm2"})
    EXPECT_TRUE(has(top.out.substr(at), want)) << want << "\n" << top.out;
  const auto bench = test::run_lfm("bench --help");
  ASSERT_EQ(bench.code, 0);
  const size_t b = bench.out.find("Examples:");
  ASSERT_NE(b, std::string::npos) << bench.out;
  for (const char* want : {"LiquidAI/", ".gguf", "llama-bench -m"}) EXPECT_TRUE(has(bench.out.substr(b), want)) << want;
}

// Jump-forward (the grammar's forced text verified like drafts) is not speculative decoding; the
// stats line labels the finish reason.
TEST(FirstHour, GenerateStatsNameWhatTheyCount) {
  test::TempDir dir("lfm_first_hour");
  const std::string schema = dir.write(
      "schema.json", R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}},
                        "required": ["name"], "additionalProperties": false})");
  const auto r = test::run_lfm("generate -m " + tiny_model() + " -p 'Name:' -n 24 --json-schema " + schema);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(has(r.out, "speculative (none)")) << r.out;
  EXPECT_TRUE(has(r.out, "grammar jump-forward (forced text): ")) << r.out;
  EXPECT_TRUE(has(r.out, "; finish reason: ")) << r.out;
}

// httplib sets SO_REUSEPORT by default: a second server would bind the same port and take part of
// the connections, silently. It must exit with an error naming the port, unless --reuse-port.
TEST(ServerPort, SecondServeOnAUsedPortIsRefused) {
  test::ServerProc first(tiny_model(), {});
  const std::string port = std::to_string(first.port());
  test::TempDir logs("lfm_port_log");
  test::Subprocess second({LFM_BINARY, "serve", "-m", tiny_model(), "--port", port, "-t", "1"},
                          (logs / "second.txt").string());
  std::string line;
  const bool listening = second.read_line(line, 20000) && line.starts_with("listening on");
  EXPECT_FALSE(listening) << "a second server started on port " << port << ": " << line;
  if (listening) second.signal(SIGKILL);
  EXPECT_EQ(second.wait(20000), 1);
  const std::string err = test::read_file(logs / "second.txt");
  EXPECT_TRUE(has(err, "port " + port + " is already in use")) << err;
  EXPECT_TRUE(has(err, "--reuse-port")) << err;
  // The first server still answers everything.
  auto c = first.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

TEST(ServerPort, ReusePortSharesOnPurpose) {
  test::ServerProc first(tiny_model(), {"--reuse-port"});
  test::TempDir logs("lfm_port_log");
  test::Subprocess second(
      {LFM_BINARY, "serve", "-m", tiny_model(), "--port", std::to_string(first.port()), "-t", "1", "--reuse-port"},
      (logs / "second.txt").string());
  std::string line;  // "probes on …" while the model loads, then "listening on …"
  while (second.read_line(line, 20000) && !line.starts_with("listening on")) {
  }
  EXPECT_TRUE(line.starts_with("listening on")) << line << test::read_file(logs / "second.txt");
  second.signal(SIGTERM);
  EXPECT_EQ(second.wait(30000), 0);
}

}  // namespace
}  // namespace lfm
