// Image memory through `lfm serve` (issue 55, class 4): decompression bombs that each pass the
// per-image limits (tests/data/image/files/bomb_8000x8000.png: 64 M pixels in 7.8 KB) are refused
// from their headers, before any is decoded, by the request's image-memory budget (413), while
// another client's stream finishes normally and the server's peak RSS stays far below what
// decoding them would take (eight of them once peaked at 2.2 GB; three such requests at once ran a
// 4 GB server out of memory with a 500).
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "server_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

using json = nlohmann::json;
using test::ServerProc;

std::string b64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string vl_fixture() { return test::data_dir() + "/hf_vl/lfm2vl_a_tied_ln"; }
std::string png_uri(const std::string& path) { return "data:image/png;base64," + b64(test::read_file(path)); }
json image_part(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }

json chat_with_images(const std::vector<std::string>& urls, int max_tokens, bool stream) {
  json parts = json::array();
  for (const std::string& u : urls) parts.push_back(image_part(u));
  parts.push_back({{"type", "text"}, {"text", "Describe these."}});
  return {{"messages", json::array({{{"role", "user"}, {"content", parts}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true},
          {"stream", stream}};
}

// A /proc/<pid>/status field in kB (-1 when absent).
int64_t proc_status_kb(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

TEST(ServerImageMemory, BombsAreRefusedFromTheirHeadersWhileOtherStreamsFinish) {
  ServerProc s(vl_fixture(), {"--parallel", "2", "--ctx-size", "512", "--kv-block-size", "4", "--http-threads", "8"});
  const std::string bomb = png_uri(test::data_dir() + "/image/files/bomb_8000x8000.png");
  const std::string small = png_uri(test::data_dir() + "/hf_vl/images/rgb_37x53.png");

  // Another client streams an image chat for the whole time.
  std::string streamed;
  int stream_status = 0;
  std::thread other([&] {
    auto c = s.client();
    auto r = c.Post("/v1/chat/completions", chat_with_images({small}, 48, true).dump(), "application/json");
    if (!r) return;
    stream_status = r->status;
    streamed = r->body;
  });

  // Eight bombs in one request (84 KB of JSON), and three such requests at once.
  const json eight = chat_with_images(std::vector<std::string>(8, bomb), 2, false);
  std::vector<int> statuses(3, 0);
  std::vector<std::string> bodies(3), retry_after(3);
  std::vector<std::thread> bombers;
  for (int i = 0; i < 3; ++i)
    bombers.emplace_back([&, i] {
      auto c = s.client();
      auto r = c.Post("/v1/chat/completions", eight.dump(), "application/json");
      if (!r) return;
      statuses[i] = r->status;
      bodies[i] = r->body;
      retry_after[i] = r->get_header_value("Retry-After");
    });
  for (auto& t : bombers) t.join();
  other.join();

  for (int i = 0; i < 3; ++i) {
    // The request can never fit the per-request budget: 413, the message naming the need and the flag.
    EXPECT_EQ(statuses[i], 413) << bodies[i].substr(0, 400);
    EXPECT_NE(bodies[i].find("--image-memory-per-request"), std::string::npos) << bodies[i].substr(0, 400);
    EXPECT_NE(bodies[i].find("8000x8000"), std::string::npos) << bodies[i].substr(0, 400);
  }
  ASSERT_EQ(stream_status, 200) << streamed.substr(0, 400);
  const auto events = test::sse_events(streamed);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  std::string finish;
  for (const std::string& ev : events)
    if (ev != "[DONE]") {
      const json ch = json::parse(ev);
      if (!ch["choices"].empty() && !ch["choices"][0]["finish_reason"].is_null())
        finish = ch["choices"][0]["finish_reason"];
    }
  EXPECT_EQ(finish, "length");

  // Nothing was decoded: the server's peak stays near its idle size (one bomb decoded is 192 MB of
  // RGB alone, its preprocessing over 1 GB).
  const int64_t hwm_kb = proc_status_kb(s.proc().pid(), "VmHWM");
  ASSERT_GT(hwm_kb, 0);
  EXPECT_LT(hwm_kb, 400 * 1024) << "peak RSS " << hwm_kb / 1024 << " MB";

  // And it still serves images.
  auto c = s.client();
  int status = 0;
  const json ok = test::post(c, "/v1/chat/completions", chat_with_images({small, small}, 2, false), &status);
  EXPECT_EQ(status, 200) << ok.dump().substr(0, 400);
}

}  // namespace
}  // namespace lfm
