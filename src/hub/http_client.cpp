#include "hub/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <exception>
#include <memory>

#include "hub/hub_error.h"
#include "core/text.h"

namespace lfm::hub {
namespace {

constexpr size_t kErrorBodyCap = 64 * 1024;

void global_init() {
  // curl_global_init is not thread-safe before libcurl 7.84; a function-local static runs it once.
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  LFM_CHECK(rc == CURLE_OK, "hub: libcurl initialisation failed: ", curl_easy_strerror(rc));
}

struct Transfer {
  HttpResponse resp;
  StreamSink* sink = nullptr;
  bool begun = false;
  bool in_memory = false;  // keep a 2xx body in resp.body (API calls)
  size_t max_body = 0;     // ... up to this many bytes
  std::exception_ptr error;
};

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line = trim(std::string(data, size * n));
  if (line.rfind("HTTP/", 0) == 0) {  // a new response in the redirect chain starts
    const size_t sp = line.find(' ');
    t->resp.status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    t->resp.headers.clear();
    t->resp.body.clear();
  } else if (const size_t colon = line.find(':'); colon != std::string::npos) {
    t->resp.headers[ascii_lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  const bool ok = t->resp.status >= 200 && t->resp.status < 300;
  try {
    if (ok && t->sink) {
      if (!t->begun) {
        t->begun = true;
        t->sink->begin(t->resp);
      }
      t->sink->write(data, len);
    } else if (ok && t->in_memory) {
      if (t->resp.body.size() + len > t->max_body)
        hub_fail(ErrorKind::kHttp, "the answer from ", t->resp.url.empty() ? std::string("the Hub") : t->resp.url,
                 " is larger than ", t->max_body, " bytes; not reading it");
      t->resp.body.append(data, len);
    } else if (t->resp.body.size() < kErrorBodyCap) {
      t->resp.body.append(data, std::min(len, kErrorBodyCap - t->resp.body.size()));
    }
  } catch (...) {
    t->error = std::current_exception();
    return 0;  // curl stops with CURLE_WRITE_ERROR; the exception is rethrown after perform
  }
  return len;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

bool cannot_reach(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
      return true;
    default:
      return false;
  }
}

// The host part of a URL ("http://h:1/x" → "http://h:1"), to tell same-host redirects apart.
std::string origin(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const size_t path = url.find('/', scheme + 3);
  return ascii_lower(url.substr(0, path));
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
  const auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

std::string url_encode(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

HttpClient::HttpClient(const Settings& settings) : settings_(settings) { global_init(); }

HttpResponse HttpClient::perform(const std::string& url, bool head, bool follow, uint64_t offset, StreamSink* sink,
                                 long deadline_s) const {
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  LFM_CHECK(curl, "hub: libcurl could not start a transfer");
  CURL* c = curl.get();
  Transfer t;
  t.sink = sink;
  t.in_memory = !sink;
  t.max_body = settings_.max_answer_bytes;
  t.resp.url = url;
  char errbuf[CURL_ERROR_SIZE] = {};

  curl_slist* list = nullptr;
  if (!settings_.token.empty()) list = curl_slist_append(list, ("Authorization: Bearer " + settings_.token).c_str());
  // Content-Length must be the file's size, not a compressed one's.
  list = curl_slist_append(list, "Accept-Encoding: identity");
  if (offset > 0) list = curl_slist_append(list, ("Range: bytes=" + std::to_string(offset) + "-").c_str());
  std::unique_ptr<curl_slist, SlistDeleter> headers(list);

  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_USERAGENT, "lfm/0.1 (libcurl)");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, settings_.connect_timeout_s);
  // A transfer slower than min_rate for this long is stalled (a drip): fail (and resume). The
  // deadline bounds a drip that stays just above it.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, std::max(1L, settings_.min_rate_bytes_s));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, settings_.stall_timeout_s);
  if (deadline_s > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT, deadline_s);
  curl_easy_setopt(c, CURLOPT_NOBODY, head ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);

  const CURLcode rc = curl_easy_perform(c);
  if (t.error) std::rethrow_exception(t.error);
  char* effective = nullptr;
  curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &effective);
  t.resp.url = effective ? effective : url;
  if (rc != CURLE_OK) {
    const std::string detail = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
    // Nothing answered at all: the network or the host is down. Otherwise the answer broke off.
    if (cannot_reach(rc) || (t.resp.status == 0 && rc == CURLE_OPERATION_TIMEDOUT))
      hub_fail(ErrorKind::kNetwork, "cannot reach ", origin(url), " (", detail, ")");
    hub_fail(ErrorKind::kInterrupted, "the transfer from ", origin(t.resp.url), " broke off (", detail, ")");
  }
  if (sink && !t.begun && t.resp.status >= 200 && t.resp.status < 300) sink->begin(t.resp);  // an empty body
  return t.resp;
}

HttpResponse HttpClient::get(const std::string& url) const { return perform(url, false, true, 0, nullptr); }

HttpResponse HttpClient::head(const std::string& url) const {
  std::string at = url;
  for (int hops = 0;; ++hops) {
    HttpResponse r = perform(at, true, false, 0, nullptr);
    const std::string location = r.header("location");
    const bool redirect = r.status >= 300 && r.status < 400 && !location.empty();
    // Relative redirects stay on the Hub (a renamed repository); absolute ones go to storage.
    if (!redirect || hops >= 5 || location.front() != '/') return r;
    at = origin(at) + location;
  }
}

HttpResponse HttpClient::stream(const std::string& url, uint64_t offset, StreamSink& sink, long deadline_s) const {
  return perform(url, false, true, offset, &sink, deadline_s);
}

}  // namespace lfm::hub
