// The server as a client reaches it (issue 41): each input is the raw bytes of one connection
// (request lines, headers, framing, bodies, several pipelined requests) served by a real `lfm
// serve` server in this process through its own connection loop (GuardedHttpServer::
// serve_connection, the same as for accepted sockets) from memory: cpp-httplib's request parsing,
// the framing checks, keep-alive and pipelining, every route and the engine behind them (a
// 2-layer model with the test tokenizer and LFM2's chat template, on the reference backend,
// context 48 so that generation stays short; /v1/embeddings and /v1/rerank on its hidden states).
// What it checks:
//   * no response is a 500 (an exception the handlers did not expect) and what the server writes
//     is a sequence of well-formed HTTP/1.1 responses (status line, headers, a body framed by
//     Content-Length or chunked encoding);
//   * /health answers over a real socket after every 64 inputs (the server still serves).
// Run from the repository root (it reads tests/data).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/embedder.h"
#include "engine/embedding_service.h"
#include "engine/engine.h"
#include "formats/safetensors_writer.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "server/server.h"
#include "server/server_impl.h"
#include "tokenizer/load_tokenizer.h"

namespace {

using namespace lfm;

[[noreturn]] void finding(const std::string& what, const std::string& response = {}) {
  std::fprintf(stderr, "fuzz_server: %s\n%.2000s\n", what.c_str(), response.c_str());
  std::abort();
}

// A 2-layer text model (conv, attention; width 32) over the test tokenizer's 65536 ids, random
// BF16 weights, with the tokenizer files and LFM2-1.2B's chat template beside it.
std::string write_model() {
  namespace fs = std::filesystem;
  const char* shm = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  const std::string dir = std::string(shm) + "/lfm_fuzz_server_" + std::to_string(getpid());
  fs::create_directories(dir);
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/lfm_fuzz_server_" +
                       std::to_string(getpid()),
                   ec);
  });
  for (const char* f : {"tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"})
    fs::copy_file(std::string("tests/data/") + f, dir + "/" + fs::path(f).filename().string());
  fs::copy_file("tests/data/assets/lfm2/LFM2-1.2B/chat_template.jinja", dir + "/chat_template.jinja");
  const nlohmann::json cfg = {{"architectures", {"Lfm2ForCausalLM"}},
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
  return dir;
}

struct Running {
  ThreadPool pool{1};
  std::unique_ptr<Backend> backend = make_reference_backend(pool);
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Engine> engine;
  // /v1/embeddings and /v1/rerank: the same model's hidden states (lfm serve --embeddings), on a
  // backend of their own beside the engine's.
  ThreadPool embed_pool{1};
  std::unique_ptr<Backend> embed_backend = make_reference_backend(embed_pool);
  std::unique_ptr<Embedder> embedder;
  std::unique_ptr<EmbeddingService> embeddings;
  std::unique_ptr<server::Server> server;
  std::thread thread;
  int port = 0;
};

// Started once and never stopped: libFuzzer ends the process with exit().
Running& running() {
  static Running* r = [] {
    auto* x = new Running;
    try {
      const std::string dir = write_model();
      LoadOptions load;
      load.run_on = x->backend.get();
      x->model = load_model(dir, load);
      x->tok = load_tokenizer(dir);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_server: run from the repository root (%s)\n", e.what());
      std::exit(2);
    }
    EngineOptions eo;
    eo.state.ctx_size = 48;
    eo.state.parallel = 2;
    eo.state.type = DType::F32;
    eo.state.draft_tokens = 4;
    eo.max_queued = 16;
    x->engine = std::make_unique<Engine>(*x->model, *x->backend, x->tok.get(), eo);
    EmbedderOptions emb;
    emb.pooling = Pooling::kLast;
    emb.normalize = true;
    x->embedder = std::make_unique<Embedder>(*x->model, x->tok.get(), *x->embed_backend, emb);
    EmbeddingServiceOptions eso;
    eso.max_tokens_per_call = 4096;  // small: the harness's inputs are at most a few KB
    x->embeddings = std::make_unique<EmbeddingService>(*x->embedder, eso);
    server::ServerOptions so;
    so.port = 0;
    so.http_threads = 4;
    so.reading_threads = 4;
    so.request_read_timeout_s = 5;
    so.max_body_bytes = 256 << 10;
    so.model_name = "fuzz";
    so.max_rerank_documents = 32;
    x->server = std::make_unique<server::Server>(x->engine.get(), x->embeddings.get(), x->tok.get(), so);
    x->port = x->server->bind();
    x->thread = std::thread([x] { x->server->run(); });
    return x;
  }();
  return *r;
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) finding("socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) finding("cannot connect to the server");
  return fd;
}

// Sends `bytes` and reads everything the server writes until it closes the connection. The
// write side stays open (cpp-httplib writes nothing to a client that has half-closed), so the
// caller ends its bytes with a request carrying `Connection: close`; when the server has written
// nothing for 500 ms (its input ended inside a request) the write side is closed after all.
std::string converse(int port, std::string_view bytes) {
  const int fd = connect_to(port);
  const auto start = std::chrono::steady_clock::now();
  auto last_heard = start;
  size_t sent = 0;
  std::string got;
  bool write_open = true;
  char buf[16384];
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start > std::chrono::seconds(10))
      finding("the server kept the connection open 10 s after the request was sent", got);
    if (write_open && sent == bytes.size() && now - last_heard > std::chrono::milliseconds(500)) {
      ::shutdown(fd, SHUT_WR);
      write_open = false;
    }
    const bool want_write = write_open && sent < bytes.size();
    pollfd p{fd, static_cast<short>(POLLIN | (want_write ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    if (p.revents & POLLIN) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;  // closed (or reset: the server may close before reading everything)
      got.append(buf, static_cast<size_t>(n));
      last_heard = std::chrono::steady_clock::now();
    } else if (p.revents & (POLLERR | POLLHUP)) {
      break;
    }
    if (want_write && (p.revents & POLLOUT)) {
      const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        ::shutdown(fd, SHUT_WR);
        write_open = false;
      } else {
        sent += static_cast<size_t>(n);
        last_heard = std::chrono::steady_clock::now();
      }
    }
  }
  ::close(fd);
  return got;
}

// One connection's bytes from memory; what the server writes is kept.
class MemoryStream final : public server::ConnectionStream {
 public:
  explicit MemoryStream(std::string_view in) : in_(in) {}
  bool is_readable() const override { return pos_ < in_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, in_.size() - pos_);
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8080;
  }
  socket_t socket() const override { return INVALID_SOCKET; }
  bool request_pending(std::chrono::milliseconds) override { return pos_ < in_.size(); }
  const std::string& written() const { return out_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  std::string out_;
};

// Checks every response on the connection: status line, headers, framed body; no 500. The
// server may stop writing mid-response only where a stream was cut (the client half-closed), so
// a truncated last body is accepted.
void check_responses(const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    if (s.compare(at, 9, "HTTP/1.1 ") != 0 || s.size() < at + 12)
      finding("not a status line at byte " + std::to_string(at), s);
    const int status = std::atoi(s.substr(at + 9, 3).c_str());
    if (status < 100 || status > 599) finding("bad status code", s.substr(at));
    if (status == 500) finding("a 500 answer (an exception the handler did not expect)", s.substr(at));
    const size_t head_end = s.find("\r\n\r\n", at);
    if (head_end == std::string::npos) return;  // cut short
    std::string head = s.substr(at, head_end - at);
    for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    at = head_end + 4;
    if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
      for (;;) {
        const size_t line_end = s.find("\r\n", at);
        if (line_end == std::string::npos) return;
        const size_t n = std::strtoul(s.substr(at, line_end - at).c_str(), nullptr, 16);
        at = line_end + 2 + n + 2;
        if (at > s.size()) return;
        if (n == 0) break;
      }
    } else if (const size_t cl = head.find("\r\ncontent-length: "); cl != std::string::npos) {
      // A HEAD request's answer states the length of the body it leaves out (our bodies are JSON,
      // text or Prometheus lines, never a status line).
      const bool head_request = s.compare(at, 9, "HTTP/1.1 ") == 0;
      if (!head_request) at += std::strtoul(head.c_str() + cl + 18, nullptr, 10);
    } else if (status != 204 && status != 304 && status >= 200) {
      return;  // a body that runs to the close
    }
  }
}

}  // namespace

namespace lfm::server {
// Server's friend: its HTTP server, to feed it a connection from memory.
struct FuzzAccess {
  static GuardedHttpServer& http(Server& s) { return s.impl_->http; }
};
}  // namespace lfm::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Running& r = running();
  static uint64_t runs = 0;
  MemoryStream connection({reinterpret_cast<const char*>(data), size});
  lfm::server::FuzzAccess::http(*r.server).serve_connection(connection);
  check_responses(connection.written());
  if (++runs % 64 == 0) {
    const std::string health = converse(r.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    if (health.rfind("HTTP/1.1 200", 0) != 0) finding("/health does not answer 200", health);
  }
  return 0;
}
