// Structured output's compile cost (issue 55): the first byte picks the input's kind (GBNF text,
// a JSON schema, a regex), the rest is the text, compiled under a WorkBudget a hundredth of the
// server's default steps. The oracle is a budget of its own, independent of the compilers' accounting:
// every input must compile, or be refused with lfm::Error, within 1 s of CPU time and 64 MiB of live
// allocation (counted here by replacing operator new and delete). Work the compilers forget to
// charge shows up as a trap: a finding.
#include <malloc.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fuzz_util.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar/work_budget.h"

namespace {

std::atomic<int64_t> g_live{0}, g_peak{0};

void* counted(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  const int64_t live = g_live.fetch_add(static_cast<int64_t>(malloc_usable_size(p))) +
                       static_cast<int64_t>(malloc_usable_size(p));
  int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void uncounted(void* p) {
  if (!p) return;
  g_live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)));
  std::free(p);
}

// The compile's own CPU time: wall time also counts whatever else the machine runs (a build
// beside the campaign tripled it and raised false findings).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

constexpr int64_t kMaxLiveBytes = int64_t{64} << 20;
constexpr double kMaxSeconds = 1.0;

}  // namespace

// Every plain and nothrow form (libFuzzer itself uses nothrow new): ASan's own would report a
// mismatch against our delete. The aligned forms stay ASan's, new and delete alike.
void* operator new(size_t n) { return counted(n); }
void* operator new[](size_t n) { return counted(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { uncounted(p); }
void operator delete[](void* p) noexcept { uncounted(p); }
void operator delete(void* p, size_t) noexcept { uncounted(p); }
void operator delete[](void* p, size_t) noexcept { uncounted(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { uncounted(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { uncounted(p); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 8192) return 0;
  using namespace lfm::grammar;
  const std::string text(lfm::fuzz::as_text(data + 1, size - 1));
  const int64_t base = g_live.load();
  g_peak.store(base);
  const double t0 = thread_cpu_seconds();
  {
    // A hundredth of the server's default steps (the release build's 50 M steps take ~0.4 s on
    // the worst seed; this build, ASan + UBSan + coverage at -O1, is ~60x slower per step), and a
    // quarter of its bytes (the real peak can pass the charged bytes by a vector's spare capacity).
    WorkBudget budget(BudgetLimits{BudgetLimits{}.steps / 100, BudgetLimits{}.bytes / 4});
    try {
      switch (data[0] % 3) {
        case 0: parse_gbnf(text, "root", &budget); break;
        case 1: {
          const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
          if (schema.is_discarded()) break;
          JsonSchemaOptions opt;
          opt.any_whitespace = data[0] & 4;
          opt.strict = data[0] & 8;
          parse_gbnf(json_schema_to_gbnf(schema, opt, &budget), "root", &budget);
          break;
        }
        default: parse_gbnf(regex_to_gbnf(text, &budget), "root", &budget); break;
      }
    } catch (const lfm::Error&) {
      // a clean refusal
    }
  }
  const double seconds = thread_cpu_seconds() - t0;
  const int64_t peak = g_peak.load() - base;
  if (seconds > kMaxSeconds || peak > kMaxLiveBytes) {
    std::fprintf(stderr, "fuzz_grammar_budget: %.3f s, %lld bytes live at peak (limits %.1f s, %lld bytes)\n", seconds,
                 static_cast<long long>(peak), kMaxSeconds, static_cast<long long>(kMaxLiveBytes));
    __builtin_trap();
  }
  return 0;
}
