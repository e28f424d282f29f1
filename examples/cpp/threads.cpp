// Eight requests from four threads on one engine through the C API; one is cancelled mid-stream
// from another thread. Checks that the cancelled one ends "cancelled", the others run their full
// length, and that equal prompts give equal tokens whatever ran beside them. Exit 0 on success.
// Usage: threads MODEL
#include <lfm/lfm.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 4, kPerThread = 2, kTokens = 24;

struct Result {
  std::vector<int32_t> tokens;
  int finish = LFM_FINISH_NONE;
};

bool ok(lfm_status s, const char* what) {
  if (s != LFM_OK) std::fprintf(stderr, "threads: %s: %s\n", what, lfm_last_error());
  return s == LFM_OK;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: threads MODEL\n");
    return 2;
  }
  lfm_model* model = nullptr;
  lfm_engine* engine = nullptr;
  lfm_engine_options eo;
  lfm_engine_options_init(&eo);
  eo.parallel = 4;
  eo.ctx_size = 256;
  if (!ok(lfm_model_load(argv[1], nullptr, &model), "load") || !ok(lfm_engine_create(model, &eo, &engine), "engine"))
    return 1;
  lfm_model_free(model);  // the engine keeps it

  std::vector<Result> results(kThreads * kPerThread);
  std::atomic<lfm_request*> victim{nullptr};  // request 0, cancelled by the main thread
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      lfm_request* reqs[kPerThread] = {};
      for (int k = 0; k < kPerThread; ++k) {
        const int i = t * kPerThread + k;
        const int32_t ids[] = {1, 23, 54, 200, 7, static_cast<int32_t>(i % 4)};  // four distinct prompts
        lfm_prompt p;
        lfm_prompt_init(&p);
        p.ids = ids;
        p.n_ids = 6;
        lfm_sampling_params sp;
        lfm_sampling_params_init(&sp);
        sp.max_tokens = i == 0 ? -1 : kTokens;  // the victim would run to the context's end
        sp.ignore_eos = 1;
        if (!ok(lfm_request_submit(engine, &p, &sp, &reqs[k]), "submit")) failed = true;
        if (i == 0) victim = reqs[k];
      }
      for (int k = 0; k < kPerThread; ++k) {
        if (!reqs[k]) continue;
        Result& r = results[t * kPerThread + k];
        lfm_event ev;
        ev.struct_size = sizeof(ev);
        while (ok(lfm_request_next(reqs[k], &ev, -1), "next")) {
          if (ev.kind == LFM_EVENT_TOKEN) r.tokens.push_back(ev.token);
          if (ev.kind == LFM_EVENT_DONE) {
            r.finish = ev.finish_reason;
            break;
          }
        }
        lfm_request_free(reqs[k]);
      }
    });
  }
  // Cancel request 0 from this thread once it has started generating.
  while (!victim.load() && !failed) std::this_thread::yield();
  for (int spins = 0; spins < 100000 && !failed; ++spins) {
    lfm_engine_stats st;
    st.struct_size = sizeof(st);
    lfm_engine_get_stats(engine, &st);
    if (st.generated_tokens >= 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (lfm_request* v = victim.load()) ok(lfm_request_cancel(v), "cancel");
  for (auto& th : threads) th.join();

  bool good = !failed;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::printf("request %zu: %zu tokens, finish %d\n", i, r.tokens.size(), r.finish);
    if (i == 0) {
      good = good && r.finish == LFM_FINISH_CANCELLED && r.tokens.size() < 250;
    } else {
      good = good && r.finish == LFM_FINISH_LENGTH && r.tokens.size() == static_cast<size_t>(kTokens);
      if (i >= 5) good = good && r.tokens == results[i - 4].tokens;  // same prompt, same tokens
    }
  }
  lfm_engine_stats st;
  st.struct_size = sizeof(st);
  good = ok(lfm_engine_get_stats(engine, &st), "stats") && good;
  std::printf("finished %lld, cancelled %lld\n", static_cast<long long>(st.finished), static_cast<long long>(st.cancelled));
  lfm_engine_free(engine);
  std::printf(good ? "ok\n" : "FAILED\n");
  return good ? 0 : 1;
}
