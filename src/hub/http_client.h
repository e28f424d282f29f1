// A small HTTP client on libcurl for the Hub: GET into memory (the API), HEAD without following
// redirects to another host (the Hub's own headers: X-Linked-Etag, X-Repo-Commit), and streamed
// GETs from a byte offset that follow redirects (to the CDN). Sends the token, never to another
// host (curl drops Authorization on a cross-host redirect, which presigned CDN URLs require).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "hub/settings.h"

namespace lfm::hub {

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names; of the last response in the chain
  std::string body;                            // in-memory GETs and error bodies (capped)
  std::string url;                             // where the last response came from
  std::string header(const std::string& lower_name) const;
};

// Receives a streamed body. `begin` runs once, when the final 2xx response's headers are in (before
// its first byte); `write` gets the bytes. Either may throw: the transfer stops and the exception
// propagates out of stream().
struct StreamSink {
  std::function<void(const HttpResponse& head)> begin;
  std::function<void(const char* data, size_t n)> write;
};

class HttpClient {
 public:
  explicit HttpClient(const Settings& settings);

  // A 2xx body is kept in memory up to Settings::max_answer_bytes (a larger one is an error).
  HttpResponse get(const std::string& url) const;
  // HEAD; a redirect to a path on the same host (a renamed repository) is followed, one to another
  // place (the CDN) is not: its headers are the answer.
  HttpResponse head(const std::string& url) const;
  // GET from byte `offset` ("Range: bytes=offset-" when > 0). A 2xx body goes to the sink; the
  // body of any other status is kept in the response (up to 64 KiB). Throws HubError kNetwork when
  // the host cannot be reached, kInterrupted when the transfer breaks off.
  // The transfer also ends (kInterrupted) when it stays under Settings::min_rate_bytes_s for
  // stall_timeout_s, or after `deadline_s` seconds in all (0: none).
  HttpResponse stream(const std::string& url, uint64_t offset, StreamSink& sink, long deadline_s = 0) const;

 private:
  HttpResponse perform(const std::string& url, bool head, bool follow, uint64_t offset, StreamSink* sink,
                       long deadline_s = 0) const;
  const Settings& settings_;
};

// Percent-encodes every byte except unreserved characters (and '/' when keep_slash).
std::string url_encode(const std::string& s, bool keep_slash);

}  // namespace lfm::hub
