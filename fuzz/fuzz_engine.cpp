// The engine under fuzzed workloads (issue 41): the input chooses the engine's shape (parallel
// sequences, KV block size, a pool small enough to preempt, token budget, prefill chunk) and up
// to six requests (prompt ids, some out of range; max_tokens; every sampling field, hostile
// values included; stop ids; drafter and draft count; a cancel after k tokens), runs them side by
// side on the reference backend with the tiny transformers fixtures (dense, MoE; a draft model),
// and checks what the engine promises:
//   * submit() refuses a request only with lfm::Error; every accepted stream ends with exactly one
//     kDone, never kError (an internal failure), with completion_tokens = the tokens delivered
//     and no more than max_tokens;
//   * a greedy request's tokens do not depend on its neighbours: the first greedy request that
//     ran to its end gives the same tokens when run again alone on a fresh engine.
// Run from the repository root (it reads tests/data/hf).
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kernels/backend.h"
#include "model/model.h"

namespace {

using namespace lfm;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_engine: %s\n", what.c_str());
  std::abort();
}

struct Fixtures {
  ThreadPool pool{1};
  std::unique_ptr<Backend> backend = make_reference_backend(pool);
  std::vector<std::unique_ptr<Model>> models;
};

Fixtures& fixtures() {
  static Fixtures* f = [] {
    auto* x = new Fixtures;
    LoadOptions load;
    load.backend = x->backend.get();
    load.run_on = x->backend.get();
    // Two dense layouts and an MoE, all with the same 256-id vocabulary (any can draft for any).
    for (const char* name : {"lfm2_c_layertypes_untied_convbias_f32", "lfm2_a_fullattnidxs_tied_f32",
                             "lfm2moe_f_tied_expertbias_f32"}) {
      try {
        x->models.push_back(load_model(std::string("tests/data/hf/") + name, load));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_engine: run from the repository root (%s)\n", e.what());
        std::exit(2);
      }
    }
    return x;
  }();
  return *f;
}

float pick_float(FuzzedDataProvider& in, std::initializer_list<float> values) {
  const std::vector<float> v(values);
  return v[in.ConsumeIntegralInRange<size_t>(0, v.size() - 1)];
}

struct Planned {
  Request req;
  int64_t cancel_after = -1;  // tokens read before the consumer cancels (-1: never)
};

Planned plan_request(FuzzedDataProvider& in, int64_t vocab) {
  Planned p;
  Request& r = p.req;
  const size_t len = in.ConsumeIntegralInRange<size_t>(0, 40);  // 0: refused (no prompt)
  for (size_t i = 0; i < len; ++i) r.prompt.push_back(in.ConsumeIntegralInRange<int32_t>(-1, static_cast<int32_t>(vocab)));
  r.max_tokens = in.ConsumeIntegralInRange<int64_t>(-1, 24);
  SamplingParams& s = r.sampling;
  const uint8_t kind = in.ConsumeIntegral<uint8_t>();
  if (kind & 1) s.temperature = pick_float(in, {0.5f, 1.0f, 2.0f, 1e-6f, -1.0f, NAN, INFINITY, 1e30f});
  if (kind & 2) s.top_k = in.ConsumeIntegralInRange<int>(-1, 300);
  if (kind & 4) s.top_p = pick_float(in, {0.0f, 0.1f, 0.9f, 1.0f, 1.5f, NAN});
  if (kind & 8) s.min_p = pick_float(in, {0.0f, 0.05f, 0.5f, 1.0f, -0.1f});
  if (kind & 16) {
    s.repetition_penalty = pick_float(in, {1.0f, 1.3f, 0.5f, 0.0f, 100.0f});
    s.presence_penalty = pick_float(in, {0.0f, 1.0f, -2.0f, 3.0f, NAN});
    s.frequency_penalty = pick_float(in, {0.0f, 0.5f, -2.0f, 2.5f});
  }
  if (kind & 32) {
    const int n = in.ConsumeIntegralInRange<int>(0, 4);
    for (int i = 0; i < n; ++i)
      s.logit_bias.push_back({in.ConsumeIntegralInRange<int32_t>(-1, static_cast<int32_t>(vocab)),
                              pick_float(in, {-100.0f, 100.0f, 5.0f, -1e30f, NAN})});
  }
  if (kind & 64) s.seed = in.ConsumeIntegral<uint64_t>();
  if (kind & 128) {
    s.logprobs = true;
    s.top_logprobs = in.ConsumeIntegralInRange<int>(-1, 22);
  }
  const int n_stop = in.ConsumeIntegralInRange<int>(0, 2);
  for (int i = 0; i < n_stop; ++i) r.stop_ids.push_back(in.ConsumeIntegralInRange<int32_t>(-1, static_cast<int32_t>(vocab)));
  r.ignore_eos = in.ConsumeBool();
  r.drafter = static_cast<Drafter>(in.ConsumeIntegralInRange<int>(0, 2));
  r.max_drafts = in.ConsumeIntegralInRange<int64_t>(-1, 12);
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) p.cancel_after = in.ConsumeIntegralInRange<int64_t>(0, 6);
  return p;
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
};

// Reads a stream to its end, checking the event contract.
Outcome drain(RequestStream& stream, const Planned& p) {
  Outcome o;
  Event ev;
  int done = 0;
  Usage usage;
  while (stream.next(ev)) {
    if (ev.kind == Event::Kind::kToken) {
      if (done) finding("a token after kDone");
      o.tokens.push_back(ev.token);
      if (p.cancel_after >= 0 && static_cast<int64_t>(o.tokens.size()) == p.cancel_after) stream.cancel();
    } else {
      ++done;
      o.finish = ev.finish;
      usage = ev.usage;
      if (ev.finish == FinishReason::kError) finding("request failed inside the engine: " + ev.error);
    }
  }
  if (done != 1) finding("a stream ended with " + std::to_string(done) + " kDone events");
  if (usage.completion_tokens != static_cast<int64_t>(o.tokens.size()))
    finding("completion_tokens " + std::to_string(usage.completion_tokens) + " but " +
            std::to_string(o.tokens.size()) + " tokens delivered");
  if (p.req.max_tokens >= 0 && static_cast<int64_t>(o.tokens.size()) > p.req.max_tokens)
    finding("more tokens than max_tokens");
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixtures& fx = fixtures();
  FuzzedDataProvider in(data, size);
  const Model& target = *fx.models[in.ConsumeIntegralInRange<size_t>(0, fx.models.size() - 1)];
  const Model* draft = in.ConsumeBool() ? fx.models[in.ConsumeIntegralInRange<size_t>(0, fx.models.size() - 1)].get()
                                        : nullptr;
  EngineOptions eo;
  eo.state.ctx_size = 64;
  eo.state.parallel = in.ConsumeIntegralInRange<int64_t>(1, 4);
  eo.state.block_tokens = in.PickValueInArray<int64_t>({1, 4, 16});
  eo.state.type = DType::F32;
  eo.state.prefix_cache = in.ConsumeBool();
  eo.state.draft_tokens = in.ConsumeIntegralInRange<int64_t>(0, 8);
  // 0: enough for every sequence; otherwise a pool that holds one context and little more.
  if (in.ConsumeBool()) eo.state.memory_bytes = 1;
  eo.batch_tokens = in.ConsumeIntegralInRange<int64_t>(1, 96);
  eo.prefill_chunk = in.ConsumeIntegralInRange<int64_t>(0, 20);
  const int64_t vocab = target.config().vocab_size;

  std::vector<Planned> plans;
  const int n = in.ConsumeIntegralInRange<int>(1, 6);
  for (int i = 0; i < n; ++i) plans.push_back(plan_request(in, vocab));

  std::unique_ptr<Engine> engine;
  try {
    engine = std::make_unique<Engine>(target, *fx.backend, nullptr, eo, draft);
  } catch (const Error&) {
    return 0;  // an impossible shape (e.g. the budget below one sequence), refused cleanly
  }
  std::vector<std::shared_ptr<RequestStream>> streams(plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    try {
      streams[i] = engine->submit(plans[i].req);
    } catch (const Error&) {
    }
  }
  std::vector<Outcome> outcomes(plans.size());
  for (size_t i = 0; i < plans.size(); ++i)
    if (streams[i]) outcomes[i] = drain(*streams[i], plans[i]);
  engine.reset();

  // Neighbour independence: the first greedy request that was not cancelled, again alone.
  for (size_t i = 0; i < plans.size(); ++i) {
    const Planned& p = plans[i];
    if (!streams[i] || p.req.sampling.temperature != 0.0f || outcomes[i].finish == FinishReason::kCancelled) continue;
    if (plans.size() == 1) break;
    Planned alone = p;
    alone.cancel_after = -1;
    Engine solo(target, *fx.backend, nullptr, eo, draft);
    const Outcome o = drain(*solo.submit(alone.req), alone);
    if (o.tokens != outcomes[i].tokens)
      finding("greedy request " + std::to_string(i) + " gave other tokens next to its neighbours than alone");
    break;
  }
  return 0;
}
