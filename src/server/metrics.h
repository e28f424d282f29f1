// A small Prometheus registry (text exposition format 0.0.4): counters with labels, gauges set
// at scrape time, and histograms. Thread-safe; observed from request handler threads.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lfm::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  void render(const std::string& name, std::string& out) const;  // caller holds the registry lock

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (non-cumulative), last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  // Counters: name → (label set "a=\"x\",b=\"y\"" → value).
  void add(const std::string& name, double v, const std::string& labels = "");
  void observe_ttft(double s);
  void observe_itl(double s);
  void observe_e2e(double s);
  // Exposition text: `gauges` (name, help, value) read now, then the counters and histograms.
  // A value read now that only grows (the engine's own tally) is a counter: `counter` true and a
  // name ending in _total; each metric is exported once, under one type.
  // `labels` ("a=\"x\",b=\"y\"", or empty) carries values a gauge states rather than measures
  // (an info metric such as lfm:cache_config_info, value 1).
  struct Gauge {
    std::string name, help;
    double value;
    bool counter = false;
    std::string labels = "";
  };
  std::string render(const std::vector<Gauge>& gauges) const;
  double counter(const std::string& name, const std::string& labels = "") const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, double>> counters_;
  std::map<std::string, std::string> help_;
  Histogram ttft_, itl_, e2e_;
};

}  // namespace lfm::server
