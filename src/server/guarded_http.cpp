#include "server/guarded_http.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
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
      fn();  // httplib's own: reads, serves and closes the connection
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
