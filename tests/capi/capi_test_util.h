// Shared by the C API's tests: the fixtures, and handles that free themselves.
#pragma once

#include <gtest/gtest.h>
#include <lfm/lfm.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace lfm_capi_test {

inline const std::string kData = LFM_TEST_DATA;
inline const std::string kFixture = kData + "/hf/lfm2_c_layertypes_untied_convbias_f32";  // no tokenizer

// A model with a tokenizer and LFM2-350M's chat template (tools included): the LFM2-VL fixture's
// files, linked into a temporary folder, with that template in place of its own.
inline std::string text_model() {
  namespace fs = std::filesystem;
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("lfm_capi_text_" + std::to_string(::getpid()));
    fs::create_directories(d);
    const fs::path src = kData + "/hf_vl/lfm2vl_a_tied_ln";
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                          "preprocessor_config.json", "processor_config.json"})
      if (!fs::exists(d / f)) fs::create_symlink(src / f, d / f);
    fs::copy_file(kData + "/assets/lfm2/LFM2-350M/chat_template.jinja", d / "chat_template.jinja",
                  fs::copy_options::overwrite_existing);
    return d.string();
  }();
  return dir;
}
struct RemoveTextModel {
  ~RemoveTextModel() {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::temp_directory_path() / ("lfm_capi_text_" + std::to_string(::getpid())), ec);
  }
};
inline RemoveTextModel remove_text_model;

struct Model {
  lfm_model* m = nullptr;
  explicit Model(const std::string& path) {
    EXPECT_EQ(lfm_model_load(path.c_str(), nullptr, &m), LFM_OK) << lfm_last_error();
  }
  ~Model() { lfm_model_free(m); }
};

struct Engine {
  lfm_engine* e = nullptr;
  explicit Engine(lfm_model* m, int parallel = 2) {
    lfm_engine_options o;
    lfm_engine_options_init(&o);
    o.ctx_size = 512;
    o.parallel = parallel;
    EXPECT_EQ(lfm_engine_create(m, &o, &e), LFM_OK) << lfm_last_error();
  }
  ~Engine() { lfm_engine_free(e); }
};

inline lfm_request* submit_ids(lfm_engine* e, const std::vector<int32_t>& ids, int64_t max_tokens) {
  lfm_prompt p;
  lfm_prompt_init(&p);
  p.ids = ids.data();
  p.n_ids = ids.size();
  lfm_sampling_params sp;
  lfm_sampling_params_init(&sp);
  sp.max_tokens = max_tokens;
  sp.ignore_eos = 1;
  sp.logprobs = 1;
  lfm_request* r = nullptr;
  EXPECT_EQ(lfm_request_submit(e, &p, &sp, &r), LFM_OK) << lfm_last_error();
  return r;
}

// A request run to its end: its tokens, text and DONE event (its strings copied).
struct Outcome {
  lfm_status status = LFM_OK;  // of the submit
  std::string error;           // lfm_last_error() when the submit failed
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<std::vector<int32_t>> top;  // each token's alternatives (top_logprobs)
  lfm_event done{};                       // its pointers are not valid after run()
  std::string message;                    // done.message_json
  std::string done_error;                 // done.error
};

inline Outcome run(lfm_engine* e, const lfm_prompt& p, const lfm_sampling_params* sp) {
  Outcome o;
  lfm_request* r = nullptr;
  o.status = lfm_request_submit(e, &p, sp, &r);
  if (o.status != LFM_OK) {
    o.error = lfm_last_error();
    EXPECT_EQ(r, nullptr);
    return o;
  }
  lfm_event ev;
  ev.struct_size = sizeof(ev);
  while (lfm_request_next(r, &ev, -1) == LFM_OK) {
    o.text.append(ev.text, ev.text_length);
    if (ev.kind == LFM_EVENT_DONE) break;
    o.tokens.push_back(ev.token);
    o.top.emplace_back(ev.top_tokens, ev.top_tokens + ev.n_top);
  }
  EXPECT_EQ(ev.kind, LFM_EVENT_DONE);
  o.done = ev;
  o.message.assign(ev.message_json, ev.message_json_length);
  o.done_error = ev.error;
  lfm_request_free(r);
  return o;
}

// Points at `ids`: keep them alive while the prompt is used.
inline lfm_prompt ids_prompt(const std::vector<int32_t>& ids) {
  lfm_prompt p;
  lfm_prompt_init(&p);
  p.ids = ids.data();
  p.n_ids = ids.size();
  return p;
}

inline lfm_sampling_params greedy_params(int64_t max_tokens, bool ignore_eos = true) {
  lfm_sampling_params sp;
  lfm_sampling_params_init(&sp);
  sp.max_tokens = max_tokens;
  sp.ignore_eos = ignore_eos;
  return sp;
}

}  // namespace lfm_capi_test
