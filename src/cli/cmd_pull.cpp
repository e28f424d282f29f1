// lfm pull: download a model from the Hugging Face Hub into its cache (or find it there) and print
// the local path, without loading it.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "hub/model_ref.h"
#include "hub/progress.h"
#include "hub/resolve.h"
#include "hub/settings.h"

namespace lfm::cli {
namespace {

int run_pull(int argc, char** argv) {
  CLI::App app{
      "Download a model from the Hugging Face Hub into the Hugging Face cache (HF_HUB_CACHE, else $HF_HOME/hub, else\n"
      "~/.cache/huggingface/hub) and print its local path. REF: owner/name (safetensors: config, tokenizer files,\n"
      "weights), owner/name:QUANT or owner/name/FILE.gguf (one GGUF; without either, a GGUF-only repository gives its\n"
      "Q4_K_M), each with an optional @revision (branch, tag or commit). HF_TOKEN is sent for gated or private\n"
      "repositories, HF_ENDPOINT names another hub, HF_HUB_OFFLINE=1 only looks in the cache."};
  configure_app(app);
  std::string ref_text;
  bool json_out = false;
  app.add_option("ref", ref_text, "owner/name[:QUANT | /FILE.gguf][@revision]")->required();
  app.add_flag("--json", json_out, "Print {\"path\", \"commit\", \"files\", \"downloaded\"}");
  LFM_CLI_PARSE(app, argc, argv);

  std::string why;
  const auto ref = hub::parse_model_ref(ref_text, &why);
  LFM_CHECK(ref, "pull: ", why);
  const hub::Settings settings = hub::settings_from_env();
  const hub::Resolved r = hub::resolve(*ref, hub::Need::kModel, settings);
  if (!r.note.empty()) std::fprintf(stderr, "lfm: %s\n", r.note.c_str());
  if (json_out) {
    nlohmann::json j = {{"ref", ref->str()},   {"path", r.path},           {"commit", r.commit},
                        {"files", r.files},    {"downloaded", r.downloaded}, {"from_cache_only", r.from_cache_only}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    if (settings.progress)
      std::fprintf(stderr, "%s: %d of %zu files downloaded, commit %s\n", ref->str().c_str(), r.downloaded,
                   r.files.size(), r.commit.substr(0, 12).c_str());
    std::printf("%s\n", r.path.c_str());
  }
  return 0;
}

CommandRegistrar reg({"pull", "download a model from the Hugging Face Hub into the cache", run_pull});

}  // namespace
}  // namespace lfm::cli
