#include "server/guarded_http.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace lfm::server {
namespace {

// The connection whose request the calling thread is handling (one thread per connection).
thread_local GuardedHttpServer::Conn* t_conn = nullptr;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A connected (not listening) TCP socket whose local port is `port`: its inode, else 0.
uint64_t accepted_socket_inode(int fd, int port) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  int listening = 0;
  socklen_t len = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening) return 0;
  sockaddr_storage a{};
  len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  int local = -1;
  if (a.ss_family == AF_INET) local = ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) local = ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  return local == port ? static_cast<uint64_t>(st.st_ino) : 0;
}

// An accepted socket read through one buffer for the whole connection, so bytes of a pipelined
// request read together with the one before stay for it. Timeouts as cpp-httplib's SocketStream.
class SocketConnectionStream final : public ConnectionStream {
 public:
  SocketConnectionStream(int fd, std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout)
      : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  bool is_readable() const override { return pos_ < buf_.size() || wait(POLLIN, read_timeout_); }
  // As cpp-httplib: a peer that has closed (end of stream readable) takes no more writes, so a
  // stream whose client went away stops (generate.cpp cancels its request).
  bool is_writable() const override {
    if (!wait(POLLOUT, write_timeout_)) return false;
    if (!wait(POLLIN, std::chrono::milliseconds(0))) return true;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == buf_.size()) {
      if (!wait(POLLIN, read_timeout_)) return -1;
      buf_.resize(kChunk);
      const ssize_t n = ::recv(fd_, buf_.data(), kChunk, 0);
      buf_.resize(n > 0 ? static_cast<size_t>(n) : 0);
      pos_ = 0;
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, buf_.size() - pos_);
    std::memcpy(ptr, buf_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(fd_, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  socket_t socket() const override { return fd_; }
  bool request_pending(std::chrono::milliseconds timeout) override {
    if (pos_ < buf_.size()) return true;
    if (!wait(POLLIN, timeout)) return false;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

 private:
  static constexpr size_t kChunk = 16384;
  bool wait(short events, std::chrono::milliseconds timeout) const {
    pollfd p{fd_, events, 0};
    int r;
    do r = ::poll(&p, 1, static_cast<int>(timeout.count()));
    while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR));
  }
  void address(bool remote, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    port = 0;
    if ((remote ? ::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len)
                : ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
      return;
    char text[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

  int fd_;
  std::chrono::milliseconds read_timeout_, write_timeout_;
  std::string buf_;
  size_t pos_ = 0;
};

std::chrono::milliseconds from_parts(time_t sec, time_t usec) {
  return std::chrono::milliseconds(static_cast<int64_t>(sec) * 1000 + static_cast<int64_t>(usec) / 1000);
}

}  // namespace

// httplib's thread pool, with each accepted connection adopted (watched) before it is queued.
class GuardedHttpServer::Queue final : public httplib::TaskQueue {
 public:
  Queue(GuardedHttpServer& server, size_t threads) : server_(server), pool_(threads) {}
  void enqueue(std::function<void()> fn) override {
    // Runs on the listening thread, right after accept(): the new socket is open, and unwatched.
    std::shared_ptr<Conn> c = server_.adopt_accepted();
    pool_.enqueue([this, c, fn = std::move(fn)] {
      t_conn = c.get();
      if (c) {
        server_.serve_socket(*c);
      } else {
        fn();  // not found (cannot happen short of /proc missing): httplib's own loop
      }
      t_conn = nullptr;
      if (c) server_.finish(c);
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  GuardedHttpServer& server_;
  httplib::ThreadPool pool_;
};

GuardedHttpServer::GuardedHttpServer(int serving, int reading_reserve) : slots_(std::max(1, serving)) {
  new_task_queue = [this, n = std::max(1, serving) + std::max(0, reading_reserve)] {
    return new Queue(*this, static_cast<size_t>(n));
  };
  watchdog_ = std::thread([this] { watch(); });
}

GuardedHttpServer::~GuardedHttpServer() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  watchdog_.join();
  for (const auto& c : conns_) ::close(c->watch_fd);
}

void GuardedHttpServer::arm(Conn& c) const {
  c.deadline.store(now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_).count());
}

std::shared_ptr<GuardedHttpServer::Conn> GuardedHttpServer::adopt_accepted() {
  if (port_ <= 0) return nullptr;
  std::lock_guard<std::mutex> g(mu_);
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return nullptr;
  std::shared_ptr<Conn> found;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == ::dirfd(dir)) continue;
    const uint64_t inode = accepted_socket_inode(fd, port_);
    if (inode == 0) continue;
    bool watched = false;
    for (const auto& c : conns_) watched = watched || c->inode == inode;
    if (watched) continue;
    found = std::make_shared<Conn>();
    found->fd = fd;
    found->watch_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    found->inode = inode;
    if (found->watch_fd < 0) return nullptr;
    arm(*found);
    conns_.insert(found);
    break;
  }
  ::closedir(dir);
  return found;
}

void GuardedHttpServer::serve_connection(ConnectionStream& s) {
  const auto idle = std::chrono::seconds(keep_alive_timeout_sec_);
  for (size_t left = keep_alive_max_count_; left > 0 && is_running(); --left) {
    if (!s.request_pending(idle)) break;
    bool closed = false;
    if (!process_request(s, left == 1, closed, nullptr) || closed) break;
  }
}

void GuardedHttpServer::serve_socket(Conn& c) {
  SocketConnectionStream s(c.fd, from_parts(read_timeout_sec_, read_timeout_usec_),
                           from_parts(write_timeout_sec_, write_timeout_usec_));
  serve_connection(s);
  ::shutdown(c.fd, SHUT_RDWR);
  ::close(c.fd);
}

void GuardedHttpServer::finish(const std::shared_ptr<Conn>& c) {
  give_back_slot(*c);  // a connection that died mid-response
  std::lock_guard<std::mutex> g(mu_);
  conns_.erase(c);
  ::close(c->watch_fd);
}

void GuardedHttpServer::read_done(bool take_slot) {
  Conn* c = t_conn;
  if (!c) return;
  c->deadline.store(0);
  if (take_slot && !c->holds_slot) {
    slots_.acquire();
    c->holds_slot = true;
  }
}

bool GuardedHttpServer::client_gone() const {
  const Conn* c = t_conn;
  if (!c) return false;
  pollfd p{c->fd, POLLIN, 0};
  int r;
  do r = ::poll(&p, 1, 0);
  while (r < 0 && errno == EINTR);
  if (r <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
  char byte;
  const ssize_t n = ::recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void GuardedHttpServer::response_written() {
  Conn* c = t_conn;
  if (!c) return;
  give_back_slot(*c);
  arm(*c);
}

void GuardedHttpServer::give_back_slot(Conn& c) {
  if (!c.holds_slot) return;
  c.holds_slot = false;
  slots_.release();
}

void GuardedHttpServer::watch() {
  std::unique_lock<std::mutex> g(mu_);
  while (!stop_) {
    stop_cv_.wait_for(g, std::chrono::milliseconds(100));
    const int64_t now = now_ns();
    for (const auto& c : conns_) {
      const int64_t d = c->deadline.load();
      if (d == 0 || now < d) continue;
      c->deadline.store(0);
      ::shutdown(c->watch_fd, SHUT_RDWR);  // the reader's recv returns; httplib closes the connection
      timeouts_.fetch_add(1);
    }
  }
}

}  // namespace lfm::server
