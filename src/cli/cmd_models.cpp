// lfm models list | rm: the models in the Hugging Face cache (shared with Python tools).
#include <algorithm>
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "hub/cache_admin.h"
#include "hub/model_ref.h"
#include "hub/progress.h"
#include "hub/settings.h"

namespace lfm::cli {
namespace {

std::string local_time(std::time_t t) {
  if (t == 0) return "-";
  char buf[32];
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

std::string revisions_text(const hub::CachedRepo& r) {
  std::string s;
  for (const auto& rev : r.revisions) {
    std::string one = rev.commit.substr(0, 12);
    for (size_t i = 0; i < rev.refs.size(); ++i) one += (i == 0 ? " (" : ", ") + rev.refs[i];
    if (!rev.refs.empty()) one += ")";
    s += (s.empty() ? "" : "; ") + one;
  }
  return s.empty() ? "-" : s;
}

int list_models(const hub::Settings& s, bool json_out) {
  const auto repos = hub::scan_cache(s.cache_dir);
  if (json_out) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : repos) {
      nlohmann::json revs = nlohmann::json::array();
      for (const auto& rev : r.revisions)
        revs.push_back({{"commit", rev.commit}, {"refs", rev.refs}, {"bytes", rev.bytes}, {"files", rev.files}});
      j.push_back({{"repo", r.repo},
                   {"path", r.dir.string()},
                   {"bytes", r.bytes},
                   {"revisions", revs},
                   {"last_used", static_cast<int64_t>(r.last_used)},
                   {"last_modified", static_cast<int64_t>(r.last_modified)}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (repos.empty()) {
    std::printf("no models in %s\n", s.cache_dir.c_str());
    return 0;
  }
  size_t w = 4;
  for (const auto& r : repos) w = std::max(w, r.repo.size());
  std::printf("%-*s  %10s  %-16s  %s\n", static_cast<int>(w), "REPO", "SIZE", "LAST USED", "REVISIONS");
  uint64_t total = 0;
  for (const auto& r : repos) {
    std::printf("%-*s  %10s  %-16s  %s\n", static_cast<int>(w), r.repo.c_str(), hub::format_bytes(r.bytes).c_str(),
                local_time(r.last_used).c_str(), revisions_text(r).c_str());
    total += r.bytes;
  }
  std::printf("%zu model%s, %s in %s\n", repos.size(), repos.size() == 1 ? "" : "s", hub::format_bytes(total).c_str(),
              s.cache_dir.c_str());
  return 0;
}

int run_models(int argc, char** argv) {
  CLI::App app{
      "The models in the Hugging Face cache (HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub), shared\n"
      "with Python tools. 'last used' is the latest access time of a model's files: lfm sets it whenever it opens one."};
  configure_app(app);
  app.require_subcommand(1);
  bool json_out = false;
  auto* list = app.add_subcommand("list", "List cached models: size on disk, last used, revisions (commit and refs)");
  list->add_flag("--json", json_out, "Print a JSON list");
  std::string ref_text;
  auto* rm = app.add_subcommand("rm", "Delete a cached model (owner/name), or one revision of it (owner/name@rev)");
  rm->add_option("ref", ref_text, "owner/name[@revision]")->required();
  LFM_CLI_PARSE(app, argc, argv);

  const hub::Settings s = hub::settings_from_env();
  if (list->parsed()) return list_models(s, json_out);
  std::string why;
  const auto ref = hub::parse_model_ref(ref_text, &why);
  LFM_CHECK(ref, "models rm: ", why);
  LFM_CHECK(ref->quant.empty() && ref->file.empty(), "models rm: '", ref_text,
            "' names one file; rm deletes a whole model (owner/name) or one revision (owner/name@rev)");
  const hub::Removal r = hub::remove_cached(s.cache_dir, *ref);
  std::printf("removed %s: %s freed\n", r.what.c_str(), hub::format_bytes(r.freed).c_str());
  return 0;
}

CommandRegistrar reg({"models", "list or delete models in the Hugging Face cache", run_models});

}  // namespace
}  // namespace lfm::cli
