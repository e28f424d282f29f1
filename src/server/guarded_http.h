// cpp-httplib's server with what a thread-per-connection server needs against slow clients: a
// client that sends one header line (or body byte) per second holds a thread for as long as it
// likes, and enough of them starve every other request, /health included.
//   * Each request's headers and body must arrive within a deadline (set_read_deadline): a
//     watchdog shuts the socket down when one passes (the blocked read fails, the connection
//     closes), as nginx's client_header_timeout / client_body_timeout and envoy's
//     request_headers_timeout do.
//   * Pipelined requests are answered in order: each connection is served by our loop over one
//     buffered stream (cpp-httplib 0.11 reads each request through a fresh buffer and drops
//     whatever of the next request it had already read, then waits out the keep-alive timeout).
//   * Connections being read do not use up the serving capacity: the pool has `reading_reserve`
//     threads beyond the `serving` limit, and requests take a serving slot only once read
//     (read_done), so /health and /metrics, which take none, answer while every slot is busy.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <semaphore>
#include <set>
#include <thread>

namespace lfm::server {

// A connection's bytes as the serving loop reads them.
class ConnectionStream : public httplib::Stream {
 public:
  // Whether the first byte of another request arrives within `timeout` (false once the client
  // has closed its side or sends nothing more).
  virtual bool request_pending(std::chrono::milliseconds timeout) = 0;
};

class GuardedHttpServer : public httplib::Server {
 public:
  // `serving`: requests handled at once; `reading_reserve`: further threads for connections
  // whose request is still arriving.
  GuardedHttpServer(int serving, int reading_reserve);
  ~GuardedHttpServer() override;
  GuardedHttpServer(const GuardedHttpServer&) = delete;
  GuardedHttpServer& operator=(const GuardedHttpServer&) = delete;

  // The listening port (after binding): how accepted connections are told from other sockets.
  void set_port(int port) { port_ = port; }
  void set_read_deadline(std::chrono::milliseconds d) { deadline_ = d; }
  // Called by a handler as it starts (the request is read): stops the calling connection's
  // deadline and, if `take_slot`, waits for a serving slot, held until the response is written.
  void read_done(bool take_slot);
  // Called when a response has been written (the server's logger): the connection's next request
  // starts arriving, under a fresh deadline; the serving slot is given back.
  void response_written();
  // Whether the client of the calling thread's connection has closed or reset it (its request was
  // read: anything readable now is either the end of the stream or a pipelined request). A
  // handler computing a whole response polls it, so a client that gave up stops the work. False
  // off an accepted socket (the fuzzing harness).
  bool client_gone() const;
  // Connections closed because their request did not arrive in time.
  int64_t timeouts() const { return timeouts_.load(); }
  // Serves the requests of one connection in order (keep-alive and pipelining, up to the
  // keep-alive count and timeout) until the client closes or asks to, or the server stops. The
  // accepted sockets go through it; the fuzzing harness feeds it bytes from memory.
  void serve_connection(ConnectionStream& s);

  struct Conn {
    int fd = -1;                       // the accepted socket (cpp-httplib's)
    int watch_fd = -1;                 // a dup of the socket: ours to shut down until we close it
    uint64_t inode = 0;                // the socket's identity (fd numbers are reused)
    std::atomic<int64_t> deadline{0};  // steady-clock ns while a request is arriving; 0 while served
    bool holds_slot = false;
  };

 private:
  class Queue;
  // cpp-httplib (0.11) hands an accepted socket to the task queue inside an opaque closure, so the
  // queue finds it: the one socket on the listening port that is not yet watched.
  std::shared_ptr<Conn> adopt_accepted();
  void serve_socket(Conn& c);  // serve_connection over the accepted socket, then closes it
  void finish(const std::shared_ptr<Conn>& c);
  void arm(Conn& c) const;
  void watch();
  void give_back_slot(Conn& c);

  int port_ = 0;
  std::chrono::milliseconds deadline_{30000};
  std::counting_semaphore<> slots_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::set<std::shared_ptr<Conn>> conns_;
  std::atomic<int64_t> timeouts_{0};
  std::thread watchdog_;
};

}  // namespace lfm::server
