// `lfm serve`'s health semantics for a Kubernetes Deployment (issue 60): the listener starts
// before the model is loaded (/health 200, /ready 503, model routes 503 "loading"), /ready turns
// 200 once it is; a failed load still exits non-zero with its message; SIGTERM turns /ready 503
// at once, keeps serving new requests for --drain-delay, then refuses them while an in-flight
// stream goes on, and the process exits 0. Also the model-server protocol's gauges (the KV
// cache's geometry and the vllm:* aliases) as the endpoint picker reads them.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "fake_hub.h"
#include "model_test_util.h"
#include "server_test_util.h"
#include "subprocess.h"
#include "test_util.h"

namespace lfm {
namespace {

using json = nlohmann::json;

int status_of(httplib::Client& c, const std::string& path) {
  auto r = c.Get(path.c_str());
  return r ? r->status : -1;
}

int post_status(httplib::Client& c, const std::string& path, const json& body) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  return r ? r->status : -1;
}

// The value of an unlabelled metric in one exposition text (-1 when absent): the aliases are
// compared within one scrape, where they cannot have moved apart.
double value_in(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

// The port of a "probes on http://127.0.0.1:PORT" or "listening on http://127.0.0.1:PORT" line.
int port_of(const std::string& line) {
  const size_t colon = line.find(':', line.find("127.0.0.1"));
  return std::stoi(line.substr(colon + 1));
}

// The model comes from a fake Hub that drips its weights: the download is the slow load, and the
// server must answer its probes meanwhile.
TEST(ServerHealth, ReadyIs503WhileTheModelLoadsThen200) {
  test::TempDir model("lfm_health_model"), cache("lfm_health_cache"), log("lfm_health_log");
  test::write_text_model(model.str());
  test::FakeHub hub;
  hub.add_folder("acme/slow", model.path(), "0123456789abcdef0123456789abcdef01234567");
  // About 150 drips 20 ms apart (~3 s), far above the download's minimum rate.
  const size_t bytes = test::read_file(model.path() / "model.safetensors").size();
  hub.set_quirks("model.safetensors", {.etag = {}, .drip_ms = 20, .drip_bytes = std::max<size_t>(2048, bytes / 150)});
  test::Subprocess proc({"/usr/bin/env", "-u", "HF_TOKEN", "-u", "HF_HUB_OFFLINE", "-u", "HF_HOME",
                         "HF_TOKEN_PATH=/nonexistent/token", "HF_ENDPOINT=" + hub.endpoint(), "HF_HUB_CACHE=" + cache.str(),
                         LFM_BINARY, "serve", "-m", "acme/slow", "--port", "0", "-t", "1", "--ctx-size", "256"},
                        log.str() + "/stderr.txt");
  std::string line;
  ASSERT_TRUE(proc.read_line(line)) << test::read_file(log.path() / "stderr.txt");
  ASSERT_TRUE(line.starts_with("probes on http://127.0.0.1:")) << line;
  httplib::Client c("127.0.0.1", port_of(line));
  c.set_read_timeout(30, 0);
  // Loading: alive, not ready, and the model's routes say why.
  EXPECT_EQ(status_of(c, "/health"), 200);
  auto ready = c.Get("/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(json::parse(ready->body)["status"], "loading");
  auto gen = c.Post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 1}}.dump(), "application/json");
  ASSERT_TRUE(gen);
  EXPECT_EQ(gen->status, 503);
  EXPECT_EQ(json::parse(gen->body)["error"]["code"], "model_loading");
  EXPECT_EQ(gen->get_header_value("Retry-After"), "5");
  EXPECT_EQ(status_of(c, "/v1/models"), 503);
  auto m = c.Get("/metrics");  // scrapers get the gauges (zero) while it loads
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("\nlfm:num_requests_running 0\n"), std::string::npos) << m->body;
  EXPECT_EQ(m->body.find("lfm:cache_config_info"), std::string::npos);  // no cache yet
  // Loaded: ready, and serving.
  ASSERT_TRUE(proc.read_line(line, 60000)) << test::read_file(log.path() / "stderr.txt");
  ASSERT_TRUE(line.starts_with("listening on http://127.0.0.1:")) << line;
  EXPECT_EQ(status_of(c, "/ready"), 200);
  EXPECT_EQ(post_status(c, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}}), 200);
  proc.signal(SIGINT);  // no drain delay
  EXPECT_EQ(proc.wait(), 0) << test::read_file(log.path() / "stderr.txt");
}

TEST(ServerHealth, AFailedLoadExitsNonZeroWithItsMessage) {
  test::TempDir empty("lfm_health_empty"), log("lfm_health_fail");
  test::Subprocess proc({LFM_BINARY, "serve", "-m", empty.str(), "--port", "0", "-t", "1"}, log.str() + "/stderr.txt");
  std::string line;
  while (proc.read_line(line, 30000)) EXPECT_FALSE(line.starts_with("listening on")) << line;
  EXPECT_NE(proc.wait(), 0);
  const std::string err = test::read_file(log.path() / "stderr.txt");
  EXPECT_NE(err.find(empty.str()), std::string::npos) << err;  // the message names the model folder
}

// A rolling update: SIGTERM with --drain-delay 3. /ready is 503 at once (the endpoint leaves the
// pool) while /health stays 200; a new request in the delay is still served; after it new
// requests get 503 while the stream that was running goes on; the stream's client then leaves
// and the server exits 0.
TEST(ServerHealth, SigtermDrainServesThenRefusesWhileAStreamGoesOn) {
  test::TempDir dir("lfm_health_drain");
  test::write_text_model(dir.str());
  test::ServerProc s(dir.str(), {"--parallel", "2", "--ctx-size", "60000", "--drain-delay", "3", "--shutdown-grace", "60"});
  std::atomic<size_t> received{0};
  std::atomic<bool> leave{false};
  auto stream = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    httplib::Request q;
    q.method = "POST";
    q.path = "/v1/completions";
    q.set_header("Content-Type", "application/json");
    q.body = json{{"prompt", "a"}, {"max_tokens", 59000}, {"ignore_eos", true}, {"stream", true}}.dump();
    std::string body;
    q.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      body.append(data, n);
      received += n;
      return !leave.load();
    };
    c.send(q);
    return body;
  });
  auto probe = s.client();
  ASSERT_EQ(test::wait_metric(probe, "lfm:num_requests_running", 1), 1);
  EXPECT_EQ(status_of(probe, "/ready"), 200);
  s.proc().signal(SIGTERM);
  int ready = 0;
  for (int i = 0; i < 250 && ready != 503; ++i) {
    ready = status_of(probe, "/ready");
    if (ready != 503) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(ready, 503);
  EXPECT_EQ(status_of(probe, "/health"), 200);  // alive: liveness must not restart a draining pod
  // Within the drain delay a new request is still served.
  EXPECT_EQ(post_status(probe, "/v1/completions", {{"prompt", "b"}, {"max_tokens", 2}}), 200);
  // Then new requests are refused, while the stream still runs.
  int status = 0;
  for (int i = 0; i < 500 && status != 503; ++i) {
    status = post_status(probe, "/v1/completions", {{"prompt", "b"}, {"max_tokens", 1}});
    if (status != 503) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 503);
  EXPECT_EQ(status_of(probe, "/health"), 200);
  const size_t before = received.load();
  for (int i = 0; i < 250 && received.load() == before; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GT(received.load(), before) << "the in-flight stream stopped when new requests were refused";
  EXPECT_EQ(test::read_metric(probe, "lfm:num_requests_running"), 1);
  leave = true;  // the client leaves: the request is cancelled and the server can stop
  const std::string body = stream.get();
  EXPECT_EQ(body.find("[DONE]"), std::string::npos);  // it was still going when its client left
  EXPECT_EQ(s.proc().wait(), 0) << s.stderr_text();
}

// The model-server protocol's gauges beyond the load ones: the KV cache's geometry as
// lfm:cache_config_info's labels (and vLLM's name for it), and the vllm:* aliases equal to lfm's.
TEST(ServerHealth, MetricsGiveTheCacheGeometryAndVllmAliases) {
  test::TempDir dir("lfm_health_metrics");
  test::write_text_model(dir.str());
  test::ServerProc s(dir.str(), {"--parallel", "3", "--ctx-size", "4096", "--kv-block-size", "32"});
  auto c = s.client();
  ASSERT_EQ(post_status(c, "/v1/completions", {{"prompt", "hello there"}, {"max_tokens", 2}}), 200);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  const std::string& b = m->body;
  const double blocks = test::read_metric(c, "lfm:kv_blocks_total");
  ASSERT_GT(blocks, 0);
  const std::string labels = "{block_size=\"32\",num_gpu_blocks=\"" + std::to_string(static_cast<int64_t>(blocks)) +
                             "\",num_conv_slots=\"3\",cache_dtype=\"";
  for (const char* name : {"lfm:cache_config_info", "vllm:cache_config_info"}) {
    EXPECT_NE(b.find(std::string("# TYPE ") + name + " gauge\n"), std::string::npos) << name;
    const size_t at = b.find(std::string("\n") + name + labels);
    ASSERT_NE(at, std::string::npos) << name << " with " << labels << " in\n" << b;
    const size_t eol = b.find('\n', at + 1);
    EXPECT_TRUE(b.substr(at, eol - at).ends_with("enable_prefix_caching=\"True\"} 1")) << b.substr(at, eol - at);
  }
  const std::pair<const char*, const char*> aliases[] = {{"vllm:num_requests_waiting", "lfm:num_requests_waiting"},
                                                         {"vllm:num_requests_running", "lfm:num_requests_running"},
                                                         {"vllm:kv_cache_usage_perc", "lfm:kv_cache_usage_perc"},
                                                         {"vllm:gpu_cache_usage_perc", "lfm:kv_cache_usage_perc"}};
  for (const auto& [alias, own] : aliases) {
    EXPECT_NE(b.find(std::string("# TYPE ") + alias + " gauge\n"), std::string::npos) << alias;
    EXPECT_EQ(value_in(b, alias), value_in(b, own)) << alias;
  }
  // While a request runs (KV blocks held) the aliases follow lfm's gauges.
  auto running = std::async(std::launch::async, [&] {
    auto k = s.client();
    return post_status(k, "/v1/completions", {{"prompt", "a b c d e f g"}, {"max_tokens", 3000}, {"ignore_eos", true}});
  });
  std::string busy;
  for (int i = 0; i < 500 && value_in(busy, "vllm:num_requests_running") != 1; ++i) {
    if (auto r = c.Get("/metrics")) busy = r->body;
  }
  EXPECT_EQ(running.get(), 200);
  ASSERT_EQ(value_in(busy, "vllm:num_requests_running"), 1) << "the request never showed as running";
  EXPECT_EQ(value_in(busy, "lfm:num_requests_running"), 1);
  EXPECT_GT(value_in(busy, "vllm:kv_cache_usage_perc"), 0);
  for (const auto& [alias, own] : aliases) EXPECT_EQ(value_in(busy, alias), value_in(busy, own)) << alias;
  // Off with --no-vllm-metrics: lfm's names only.
  test::ServerProc plain(dir.str(), {"--ctx-size", "256", "--no-vllm-metrics"});
  auto p = plain.client();
  auto pm = p.Get("/metrics");
  ASSERT_TRUE(pm);
  EXPECT_EQ(pm->body.find("vllm:"), std::string::npos);
  EXPECT_NE(pm->body.find("\nlfm:cache_config_info{block_size=\"16\""), std::string::npos) << pm->body;
}

}  // namespace
}  // namespace lfm
