#include "engine/generation_config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"

namespace lfm {

namespace {

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::optional<double> field(const nlohmann::json& j, const char* name, double lo, double hi, const std::string& source) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  LFM_CHECK(it->is_number(), source, ": '", name, "' must be a number, got ", json_excerpt(*it));
  const double v = it->get<double>();
  LFM_CHECK(std::isfinite(v) && v >= lo && v <= hi, source, ": '", name, "' is ", number_text(v), ", outside [",
            number_text(lo), ", ", number_text(hi), "]");
  return v;
}

}  // namespace

std::string SamplingDefaults::describe() const {
  std::string out;
  auto add = [&](const char* name, std::optional<double> v) {
    if (v) out += (out.empty() ? "" : ", ") + std::string(name) + " " + number_text(*v);
  };
  add("temperature", temperature);
  add("top_p", top_p);
  add("top_k", top_k ? std::optional<double>(*top_k) : std::nullopt);
  add("min_p", min_p);
  add("repetition_penalty", repetition_penalty);
  return out.empty() ? "none" : out;
}

void SamplingDefaults::apply(SamplingParams& s) const {
  if (temperature) s.temperature = *temperature;
  if (top_p) s.top_p = *top_p;
  if (top_k) s.top_k = *top_k;
  if (min_p) s.min_p = *min_p;
  if (repetition_penalty) s.repetition_penalty = *repetition_penalty;
}

SamplingDefaults parse_generation_config(const std::string& text, const std::string& source) {
  const nlohmann::json j = parse_json(text, source);
  LFM_CHECK(j.is_object(), source, ": must hold a JSON object");
  SamplingDefaults d;
  d.source = source;
  if (auto v = field(j, "temperature", 0, 100, source)) d.temperature = static_cast<float>(*v);
  if (auto v = field(j, "top_p", 0, 1, source)) d.top_p = static_cast<float>(*v > 0 ? *v : 1e-6);
  if (auto v = field(j, "min_p", 0, 0.999999, source)) d.min_p = static_cast<float>(*v);
  if (auto v = field(j, "repetition_penalty", 0.01, 100, source)) d.repetition_penalty = static_cast<float>(*v);
  if (auto v = field(j, "top_k", -1, 1 << 30, source)) {
    LFM_CHECK(*v == std::floor(*v), source, ": 'top_k' must be an integer, got ", number_text(*v));
    d.top_k = *v < 0 ? 0 : static_cast<int>(*v);  // -1: off
  }
  return d;
}

SamplingDefaults load_sampling_defaults(const std::string& spec, const std::string& model_path) {
  namespace fs = std::filesystem;
  if (spec == "none") return {};
  std::string path = spec;
  if (spec == "auto") {
    std::error_code ec;
    if (!fs::is_directory(model_path, ec)) return {};
    path = (fs::path(model_path) / "generation_config.json").string();
    if (!fs::exists(path, ec)) return {};
  }
  return parse_generation_config(read_text_file(path, "--generation-config file"), path);
}

}  // namespace lfm
