#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace lfm {

std::vector<int32_t> generate(Forward& fwd, SequenceState& state, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token,
                              GenerateStats* stats) {
  LFM_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token)");
  LFM_CHECK(opt.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", opt.max_new_tokens);
  using clock = std::chrono::steady_clock;
  Sampler sampler(opt.sampler);
  sampler.set_allowed(opt.allowed);
  StepOutput out;
  std::vector<int32_t> generated;

  auto t0 = clock::now();
  const int64_t chunk = opt.prefill_chunk > 0 ? opt.prefill_chunk : static_cast<int64_t>(prompt.size());
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t end = std::min(prompt.size(), begin + static_cast<size_t>(chunk));
    BatchItem item{&state, std::span<const int32_t>(prompt.data() + begin, end - begin), false};
    fwd.step(std::span<const BatchItem>(&item, 1), out);
  }
  auto t1 = clock::now();
  while (static_cast<int64_t>(generated.size()) < opt.max_new_tokens) {
    const int32_t tok = sampler.sample(out.row(0), out.vocab);
    generated.push_back(tok);
    const bool keep_going = on_token ? on_token(tok) : true;
    if (!keep_going || std::find(opt.stop_ids.begin(), opt.stop_ids.end(), tok) != opt.stop_ids.end()) break;
    if (static_cast<int64_t>(generated.size()) == opt.max_new_tokens) break;
    BatchItem item{&state, std::span<const int32_t>(&generated.back(), 1), false};
    fwd.step(std::span<const BatchItem>(&item, 1), out);
  }
  auto t2 = clock::now();
  if (stats) {
    stats->prompt_tokens = static_cast<int64_t>(prompt.size());
    stats->generated_tokens = static_cast<int64_t>(generated.size());
    stats->prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
    stats->decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  }
  return generated;
}

}  // namespace lfm
