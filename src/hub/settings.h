// Where the Hub is, where its cache lives, who we are and whether to go online: read from the
// environment variables huggingface_hub uses, so both tools share one cache and one login.
#pragma once

#include <filesystem>
#include <string>

namespace lfm::hub {

struct Settings {
  std::string endpoint = "https://huggingface.co";  // no trailing slash
  std::filesystem::path cache_dir;                   // the hub cache: models--owner--name/ live here
  std::string token;                                 // sent as "Authorization: Bearer" when set
  bool offline = false;                              // never touch the network; the cache only
  bool progress = false;                             // draw progress bars on stderr
  long connect_timeout_s = 10;                       // to open a connection
  long stall_timeout_s = 10;                         // a transfer slower than min_rate this long fails
  long min_rate_bytes_s = 1024;                      // the slowest rate a transfer may keep up (see above)
  // A file's transfer ends after this many seconds, whatever its rate: 0 → 5 minutes plus the file's
  // size at 256 KiB/s (an hour for files of unknown size), so a drip just above min_rate ends too.
  long transfer_deadline_s = 0;
  size_t max_answer_bytes = size_t{64} << 20;        // an API answer kept in memory
  int attempts = 3;                                  // tries per file; later ones resume the partial file
  double retry_delay_s = 1.0;                        // before try k+1: k times this
};

// From the environment, as huggingface_hub reads it:
//   cache:    HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, where HF_HOME defaults
//             to $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface
//   endpoint: HF_ENDPOINT (default https://huggingface.co)
//   token:    HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else the file $HF_TOKEN_PATH or $HF_HOME/token
//             (written by `hf auth login`)
//   offline:  HF_HUB_OFFLINE=1 (also ON/YES/TRUE)
//   timeouts: HF_HUB_ETAG_TIMEOUT (connect), HF_HUB_DOWNLOAD_TIMEOUT (stalled transfer), seconds
//   progress: when stderr is a terminal, unless HF_HUB_DISABLE_PROGRESS_BARS=1
Settings settings_from_env();

// huggingface_hub's reading of a boolean variable: 1, ON, YES, TRUE (any case).
bool env_flag(const char* name);

}  // namespace lfm::hub
