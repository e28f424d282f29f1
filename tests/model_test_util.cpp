#include "model_test_util.h"

#include "core/error.h"
#include "engine/engine.h"
#include "model/forward.h"

namespace lfm::test {

StatePlanOptions f32_plan(int64_t ctx, int64_t block_tokens) {
  StatePlanOptions p;
  p.ctx_size = ctx;
  p.block_tokens = block_tokens;
  p.type = DType::F32;
  return p;
}

std::vector<std::vector<float>> prompt_logits(const Model& model, Backend& backend, const std::vector<int32_t>& ids,
                                              const StatePlanOptions& plan) {
  auto cache = make_state_cache(model, plan);
  Forward fwd(model, backend, *cache);
  StepOutput out;
  BatchItem item{cache->open(plan.ctx_size), ids, true};
  fwd.step(std::span<const BatchItem>(&item, 1), out);
  std::vector<std::vector<float>> rows;
  for (size_t p = 0; p < ids.size(); ++p) rows.emplace_back(out.row(0, static_cast<int64_t>(p)), out.row(0, static_cast<int64_t>(p)) + out.vocab);
  return rows;
}

std::vector<int32_t> greedy(const Model& model, Backend& backend, const std::vector<int32_t>& prompt, int64_t n,
                            const Tokenizer* tok, const StatePlanOptions& plan) {
  EngineOptions eo;
  eo.state = plan;
  Engine engine(model, backend, tok, eo);
  Request req;
  req.prompt = prompt;
  req.max_tokens = n;
  req.ignore_eos = true;
  auto stream = engine.submit(req);
  std::vector<int32_t> got;
  Event ev;
  while (stream->next(ev)) {
    if (ev.kind == Event::Kind::kToken) got.push_back(ev.token);
    if (ev.kind == Event::Kind::kDone && ev.finish == FinishReason::kError) fail("test: generation failed: ", ev.error);
  }
  return got;
}

}  // namespace lfm::test
