// Helpers shared by the `lfm serve` tests (server_test.cpp, server_api_test.cpp): a server
// process on a free loopback port, JSON posts, SSE parsing, /metrics polling, raw socket
// exchanges, and the scripted model that answers a chat turn with an exact tool call.
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "chat/chat_template.h"
#include "model_test_util.h"
#include "subprocess.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm::test {

// A running `lfm serve` on a free loopback port.
class ServerProc {
 public:
  ServerProc(const std::string& model, std::vector<std::string> extra) {
    std::vector<std::string> argv = {LFM_BINARY, "serve", "-m", model, "--port", "0", "-t", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<Subprocess>(argv, log_.str() + "/stderr.txt");
    std::string line;
    while (proc_->read_line(line))
      if (line.rfind("listening on http://127.0.0.1:", 0) == 0) {
        port_ = std::stoi(line.substr(line.rfind(':') + 1));
        return;
      }
    throw std::runtime_error("server did not start: " + read_file(log_ / "stderr.txt"));
  }
  ~ServerProc() {
    proc_->signal(SIGKILL);
    proc_->wait();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  Subprocess& proc() { return *proc_; }
  std::string stderr_text() const { return read_file(log_ / "stderr.txt"); }
  int port() const { return port_; }

 private:
  TempDir log_{"lfm_serve_log"};
  std::unique_ptr<Subprocess> proc_;
  int port_ = 0;
};

inline nlohmann::json post(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                           int* status = nullptr, const httplib::Headers& h = {}) {
  auto r = c.Post(path.c_str(), h, body.dump(), "application/json");
  if (!r) throw std::runtime_error("no response from " + path);
  if (status) *status = r->status;
  return nlohmann::json::parse(r->body);
}

// The data payloads of an SSE body, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

// The value of an unlabelled metric in /metrics now (-1 when absent or unreachable).
inline double read_metric(httplib::Client& c, const std::string& name) {
  auto r = c.Get("/metrics");
  if (!r) return -1;
  const size_t at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(r->body.substr(at + name.size() + 2));
}

// Polls /metrics until `name` reads `value` (or 10 s pass); returns the last reading.
inline double wait_metric(httplib::Client& c, const std::string& name, double value) {
  double v = -1;
  for (int i = 0; i < 500; ++i) {
    v = read_metric(c, name);
    if (v == value) return v;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return v;
}

// /metrics once it contains `text` (or after 10 s, as last read; empty when unreachable). The
// request counter (lfm:http_requests_total) is bumped by the HTTP layer's logger after a response
// has gone out, possibly just after the client has read it: a test waits for the count rather
// than racing it.
inline std::string wait_metrics_text(httplib::Client& c, const std::string& text) {
  std::string body;
  for (int i = 0; i < 500; ++i) {
    auto r = c.Get("/metrics");
    body = r ? r->body : std::string();
    if (body.find(text) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return body;
}

// A socket connected to the server on loopback (-1 when it cannot connect).
inline int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// Sends raw bytes to the server and returns what it answers before closing (or 5 s pass).
inline std::string raw_exchange(int port, const std::string& bytes) {
  const int fd = connect_loopback(port);
  if (fd < 0) return "connect failed";
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)!::write(fd, bytes.data(), bytes.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
    out.append(buf, static_cast<size_t>(n));
    if (out.find("\r\n\r\n") != std::string::npos && out.find("}") != std::string::npos) break;
  }
  ::close(fd);
  return out;
}

// Writes a scripted model (write_scripted_model) into `dir` that answers the chat turn "What
// time is it?" (rendered by the model's template with a generation prompt) with
// `<|tool_call_start|>[get_time(tz=1)]<|tool_call_end|><|im_end|>`, and also continues a
// prompt that tool_choice get_time prefilled with "<|tool_call_start|>[get_time(".
inline void write_tool_call_model(const std::string& dir, const std::string& text_model) {
  const auto tok = load_tokenizer(text_model);
  ChatTemplate tpl(tok->chat_template(), tok->bos_token(), tok->eos_token(), std::nullopt);
  const nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", "What time is it?"}}});
  const std::string prompt = tpl.render(nlohmann::ordered_json::parse(msgs.dump()), nullptr, true);
  const std::string call = "<|tool_call_start|>[get_time(tz=1)]<|tool_call_end|><|im_end|>";
  const auto chain = tok->encode(call, false);
  std::vector<std::pair<int32_t, int32_t>> next = {{tok->encode(prompt, false).back(), chain[0]}};
  for (size_t i = 0; i + 1 < chain.size(); ++i) next.push_back({chain[i], chain[i + 1]});
  const auto forced = tok->encode(prompt + "<|tool_call_start|>[get_time(", false);
  size_t k = 0;
  while (k < chain.size() && tok->decode(std::vector<int32_t>(chain.begin(), chain.begin() + k + 1), false).size() <
                                 std::string("<|tool_call_start|>[get_time(").size())
    ++k;
  if (forced.back() != chain[k]) next.push_back({forced.back(), chain[k + 1]});
  write_scripted_model(dir, next);
}

}  // namespace lfm::test
