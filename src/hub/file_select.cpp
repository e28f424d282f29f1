#include "hub/file_select.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "core/text.h"
#include "hub/hub_error.h"

namespace lfm::hub {
namespace {

std::string basename(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool is_gguf(const std::string& p) { return p.size() > 5 && ascii_lower(p.substr(p.size() - 5)) == ".gguf"; }

// Length of a split-GGUF suffix "-NNNNN-of-NNNNN.gguf" (any case) ending `name`, or 0. (Plain
// code rather than std::regex: GCC 12's <regex> trips its own -Wmaybe-uninitialized.)
size_t split_suffix_length(const std::string& name) {
  static const std::string pattern = "-#####-of-#####.gguf";  // '#': a digit
  if (name.size() < pattern.size()) return 0;
  const size_t start = name.size() - pattern.size();
  for (size_t i = 0; i < pattern.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[start + i]);
    const bool ok = pattern[i] == '#' ? std::isdigit(c) != 0 : std::tolower(c) == pattern[i];
    if (!ok) return 0;
  }
  return pattern.size();
}

// Files a safetensors model may come with; fetched when present, never required.
const std::vector<std::string> kTokenizerFiles = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                                  "chat_template.jinja"};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The available quants, one entry per tag (a split model counted once, marked).
std::string describe_quants(const std::vector<std::string>& ggufs) {
  std::map<std::string, bool> tags;  // tag → split
  for (const auto& g : ggufs) tags[gguf_quant_tag(g)] |= is_split_gguf(g);
  std::vector<std::string> out;
  for (const auto& [tag, split] : tags) out.push_back(split ? tag + " (split, not supported)" : tag);
  return join(out);
}

std::string choose_gguf(const std::vector<std::string>& ggufs, const ModelRef& ref) {
  const std::string repo = ref.repo;
  std::string file;
  if (!ref.file.empty()) {
    if (std::find(ggufs.begin(), ggufs.end(), ref.file) == ggufs.end())
      hub_fail(ErrorKind::kUsage, "repository '", repo, "' at revision '", ref.revision, "' has no file '", ref.file,
               "'", ggufs.empty() ? std::string(" (and no GGUF files)") : "; its GGUF files: " + join(ggufs));
    file = ref.file;
  } else {
    const std::string want = ref.quant.empty() ? "Q4_K_M" : ref.quant;
    std::vector<std::string> exact, partial;
    for (const auto& g : ggufs) {
      if (ascii_lower(gguf_quant_tag(g)) == ascii_lower(want)) exact.push_back(g);
      if (ascii_lower(basename(g)).find(ascii_lower(want)) != std::string::npos) partial.push_back(g);
    }
    std::vector<std::string> hits = !exact.empty() ? exact : partial;
    // A split model's parts share a tag: one choice.
    const bool all_split = !hits.empty() && std::all_of(hits.begin(), hits.end(), [](const auto& h) { return is_split_gguf(h); });
    if (ref.quant.empty() && ggufs.size() == 1) {
      file = ggufs[0];
    } else if (hits.size() == 1 || all_split) {
      file = hits[0];
    } else if (hits.empty() && ref.quant.empty()) {
      hub_fail(ErrorKind::kUsage, "repository '", repo, "' holds several GGUF files and no Q4_K_M; pick one with ", repo,
               ":QUANT — available: ", describe_quants(ggufs));
    } else if (hits.empty()) {
      hub_fail(ErrorKind::kUsage, "repository '", repo, "' has no GGUF file for quant '", ref.quant, "'; available: ",
               describe_quants(ggufs));
    } else {
      hub_fail(ErrorKind::kUsage, "quant '", want, "' matches several files of '", repo, "': ", join(hits),
               "; name one with ", repo, "/FILE.gguf");
    }
  }
  if (is_split_gguf(file))
    hub_fail(ErrorKind::kUsage, "'", file, "' of '", repo,
             "' is one part of a split GGUF, which lfm does not load; merge the parts with llama.cpp's "
             "`llama-gguf-split --merge` or pick another quant (available: ",
             describe_quants(ggufs), ")");
  return file;
}

}  // namespace

std::string gguf_quant_tag(const std::string& filename) {
  std::string stem = basename(filename);
  if (const size_t n = split_suffix_length(stem)) stem = stem.substr(0, stem.size() - n) + ".gguf";
  if (is_gguf(stem)) stem = stem.substr(0, stem.size() - 5);
  const size_t cut = stem.find_last_of("-.");
  return cut == std::string::npos ? stem : stem.substr(cut + 1);
}

bool is_split_gguf(const std::string& filename) { return split_suffix_length(basename(filename)) > 0; }

Selection select_files(const std::vector<std::string>& listing, const ModelRef& ref, Need need) {
  const std::set<std::string> have(listing.begin(), listing.end());
  std::vector<std::string> ggufs;
  for (const auto& p : listing)
    if (is_gguf(p) && ascii_lower(basename(p)).rfind("mmproj", 0) != 0) ggufs.push_back(p);  // vision projectors are not models
  if (!ref.file.empty() && is_gguf(ref.file) && have.count(ref.file) && ascii_lower(basename(ref.file)).rfind("mmproj", 0) == 0)
    hub_fail(ErrorKind::kUsage, "'", ref.file, "' of '", ref.repo, "' is a vision projector, not a model");

  const bool has_config = have.count("config.json") > 0;
  const bool single = have.count("model.safetensors") > 0, sharded = have.count("model.safetensors.index.json") > 0;
  Selection sel;
  // GGUF when one is named, or when GGUFs are the only weights (a "-GGUF" repository).
  if (!ref.file.empty() || !ref.quant.empty() || (!single && !sharded && !ggufs.empty())) {
    if (ggufs.empty() && ref.file.empty())
      hub_fail(ErrorKind::kUsage, "repository '", ref.repo, "' at revision '", ref.revision, "' has no GGUF files",
               has_config ? "; drop the :QUANT to use its safetensors checkpoint" : "");
    sel.gguf = true;
    sel.files = {choose_gguf(ggufs, ref)};
    return sel;
  }
  if (!has_config)
    hub_fail(ErrorKind::kUsage, "repository '", ref.repo, "' at revision '", ref.revision,
             "' has neither config.json nor GGUF files: it is not a model lfm can load",
             listing.empty() ? std::string(" (it is empty)") : " (files: " + join(listing) + ")");
  const auto add_if_present = [&](const std::string& f) {
    if (have.count(f)) sel.files.push_back(f);
  };
  switch (need) {
    case Need::kConfig:
      sel.files = {"config.json"};
      add_if_present("generation_config.json");
      break;
    case Need::kTokenizer:
      if (!have.count("tokenizer.json"))
        hub_fail(ErrorKind::kUsage, "repository '", ref.repo, "' at revision '", ref.revision, "' has no tokenizer.json");
      for (const auto& f : kTokenizerFiles) add_if_present(f);
      break;
    case Need::kModel:
      if (!single && !sharded)
        hub_fail(ErrorKind::kUsage, "repository '", ref.repo, "' at revision '", ref.revision,
                 "' has no model.safetensors or model.safetensors.index.json (lfm loads safetensors or GGUF, not "
                 "PyTorch .bin files)");
      sel.files = {"config.json"};
      add_if_present("generation_config.json");
      for (const auto& f : kTokenizerFiles) add_if_present(f);
      // The loader reads model.safetensors when it exists and the index only otherwise.
      if (single) {
        sel.files.push_back("model.safetensors");
      } else {
        sel.files.push_back("model.safetensors.index.json");
        sel.sharded_index = "model.safetensors.index.json";
      }
      break;
  }
  return sel;
}

std::vector<std::string> index_shards(const std::string& index_json, const std::string& origin) {
  check_json_depth(index_json, cat("hub: '", origin, "'"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(index_json);
  } catch (const nlohmann::json::exception& e) {
    fail("hub: '", origin, "' is not valid JSON: ", e.what());
  }
  LFM_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "hub: '", origin,
            "' has no weight_map object");
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& [name, file] : j["weight_map"].items()) {
    LFM_CHECK(file.is_string(), "hub: weight_map entry for '", name, "' in '", origin, "' is not a file name");
    const std::string f = file.get<std::string>();
    LFM_CHECK(f.find('/') == std::string::npos && f.find("..") == std::string::npos && !f.empty(), "hub: '", origin,
              "' names a shard outside the folder: '", f, "'");
    if (seen.insert(f).second) out.push_back(f);
  }
  return out;
}

}  // namespace lfm::hub
