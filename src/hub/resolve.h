// A model reference to local files: the Hub is asked which commit the revision is at and which
// files it holds, the files lfm needs are downloaded into the cache unless already there, and the
// snapshot folder (or the .gguf in it) is returned. Offline (HF_HUB_OFFLINE=1), or when the Hub
// cannot be reached, the cache alone answers.
#pragma once

#include <string>
#include <vector>

#include "hub/file_select.h"
#include "hub/model_ref.h"
#include "hub/settings.h"

namespace lfm::hub {

struct Resolved {
  std::string path;                // the snapshot folder, or the .gguf file inside it
  std::string commit;
  std::vector<std::string> files;  // the repository paths that make up the model
  int downloaded = 0;              // files fetched by this call
  bool from_cache_only = false;    // the Hub was not asked (offline) or could not be reached
  std::string note;                // why the cache alone answered when the Hub was not reachable
};

Resolved resolve(const ModelRef& ref, Need need, const Settings& s);

// The -m argument of every command: an existing path is used as it is (a local folder or file
// always wins), so is anything not shaped like a Hub reference (the loader then names it);
// a reference is resolved, its note (if any) printed on stderr.
std::string resolve_model_arg(const std::string& arg, Need need, const Settings& s);

}  // namespace lfm::hub
