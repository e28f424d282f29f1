#include "server/metrics.h"

#include <charconv>
#include <cmath>

namespace lfm::server {

namespace {
// The shortest text that reads back as `v` ("0.005", not %.17g's "0.0050000000000000001"):
// bucket labels are compared as strings by dashboards and by histogram_quantile's grouping.
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum " + num(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 300.0}) {
  help_ = {
      {"lfm:http_requests_total", "HTTP requests by route and status code."},
      {"lfm:prompt_tokens_total", "Prompt tokens of finished requests."},
      {"lfm:generation_tokens_total", "Generated tokens of finished requests."},
      {"lfm:prefix_cache_hit_tokens_total", "Prompt tokens taken from the prefix cache."},
      {"lfm:spec_decode_num_draft_tokens_total", "Speculative decoding: drafted tokens verified (finished requests)."},
      {"lfm:spec_decode_num_accepted_tokens_total", "Speculative decoding: drafted tokens accepted (finished requests)."},
      {"lfm:speech_audio_seconds_total", "Seconds of audio /v1/audio/speech answered with (finished answers)."},
  };
}

void Metrics::add(const std::string& name, double v, const std::string& labels) {
  std::lock_guard lock(mu_);
  counters_[name][labels] += v;
}

void Metrics::observe_ttft(double s) {
  std::lock_guard lock(mu_);
  ttft_.observe(s);
}
void Metrics::observe_itl(double s) {
  std::lock_guard lock(mu_);
  itl_.observe(s);
}
void Metrics::observe_e2e(double s) {
  std::lock_guard lock(mu_);
  e2e_.observe(s);
}

double Metrics::counter(const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mu_);
  auto it = counters_.find(name);
  if (it == counters_.end()) return 0;
  auto jt = it->second.find(labels);
  return jt == it->second.end() ? 0 : jt->second;
}

std::string Metrics::render(const std::vector<Gauge>& gauges) const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& g : gauges) {
    out += "# HELP " + g.name + " " + g.help + "\n# TYPE " + g.name + (g.counter ? " counter\n" : " gauge\n");
    out += g.name + (g.labels.empty() ? "" : "{" + g.labels + "}") + " " + num(g.value) + "\n";
  }
  for (const auto& [name, help] : help_) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n";
    auto it = counters_.find(name);
    if (it == counters_.end() || it->second.empty()) {
      out += name + " 0\n";
      continue;
    }
    for (const auto& [labels, v] : it->second) out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + num(v) + "\n";
  }
  const std::pair<const char*, const Histogram*> hs[] = {{"lfm:time_to_first_token_seconds", &ttft_},
                                                        {"lfm:inter_token_latency_seconds", &itl_},
                                                        {"lfm:e2e_request_latency_seconds", &e2e_}};
  const char* helps[] = {"Time from request arrival to its first token.", "Time between consecutive tokens of a request.",
                         "Time from request arrival to its end."};
  for (size_t i = 0; i < 3; ++i) {
    out += std::string("# HELP ") + hs[i].first + " " + helps[i] + "\n# TYPE " + hs[i].first + " histogram\n";
    hs[i].second->render(hs[i].first, out);
  }
  return out;
}

}  // namespace lfm::server
