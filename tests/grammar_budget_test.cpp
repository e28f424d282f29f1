// Hostile structured-output inputs (issue 55, classes 2 and 4): small schemas, regexes and GBNF
// texts that used to expand exponentially or quadratically, or allocate ~100 MB before being
// refused. Each runs in a forked child under an address-space limit and a CPU-time limit (the
// bugs took minutes or gigabytes; a refusal takes milliseconds), and must end in a clean
// lfm::Error naming the component, or compile.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_builder.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar/token_grammar.h"
#include "grammar/work_budget.h"
#include "test_util.h"

namespace lfm::grammar {
namespace {

// The process's address space now (bytes), from /proc/self/statm.
size_t address_space() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0;
  f >> pages;
  return pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// Runs `body` in a forked child allowed `extra_bytes` of address space beyond the parent's and
// `cpu_seconds` of CPU time. `body` returns "" when it behaved, else what went wrong. The result
// is "" or a description of the failure (the child's message, a signal, running out of memory).
std::string isolated(size_t extra_bytes, int cpu_seconds, const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const size_t limit = address_space() + extra_bytes;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    rlimit as{limit, limit}, cpu{static_cast<rlim_t>(cpu_seconds), static_cast<rlim_t>(cpu_seconds)};
    ::setrlimit(RLIMIT_AS, &as);
    ::setrlimit(RLIMIT_CPU, &cpu);
    std::string msg;
    try {
      msg = body();
    } catch (const std::bad_alloc&) {
      msg = "allocated more than the memory limit";
    } catch (const std::exception& e) {
      msg = std::string("unexpected exception: ") + e.what();
    }
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    return WTERMSIG(status) == SIGXCPU || WTERMSIG(status) == SIGKILL
               ? "ran past the CPU-time limit of " + std::to_string(cpu_seconds) + " s"
               : "killed by signal " + std::to_string(WTERMSIG(status));
  return msg;
}

// "" when `compile` throws lfm::Error whose message contains `says`.
std::string refused(const std::function<void()>& compile, const std::string& says) {
  try {
    compile();
  } catch (const Error& e) {
    const std::string what = e.what();
    return what.find(says) != std::string::npos ? "" : "refused, but the message lacks '" + says + "': " + what;
  }
  return "accepted";
}

constexpr size_t kMiB = size_t{1} << 20;

// 25 levels of `allOf: [$ref next, $ref next]`: 1.8 KB of schema, 2^25 merges when expanded.
nlohmann::ordered_json exponential_allof_schema(int levels) {
  nlohmann::ordered_json defs = nlohmann::ordered_json::object();
  for (int i = 0; i < levels; ++i) {
    const std::string next = "#/$defs/a" + std::to_string(i + 1);
    defs["a" + std::to_string(i)] = {{"allOf", {{{"$ref", next}}, {{"$ref", next}}}}};
  }
  defs["a" + std::to_string(levels)] = {{"type", "string"}};
  return {{"$defs", defs}, {"$ref", "#/$defs/a0"}};
}

// root ::= r0, r0 ::= r1, ..., rN ::= "": every rule nullable, each found one pass after the next.
std::string nullable_chain(int n) {
  std::string g = "root ::= r0\n";
  for (int i = 0; i < n; ++i) g += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  return g + "r" + std::to_string(n) + " ::= \"\"\n";
}

TEST(GrammarBudget, NestedCountedRepetitionInGbnfIsRefusedBeforeExpansion) {
  // 10^8 elements once the inner group is inlined into each of the outer copies.
  EXPECT_EQ(isolated(64 * kMiB, 10, [] { return refused([] { parse_gbnf("root ::= (\"a\"{9999}){9999}\n"); }, "grammar"); }),
            "");
}

TEST(GrammarBudget, NestedCountedRepetitionInRegexIsRefusedBeforeExpansion) {
  EXPECT_EQ(isolated(64 * kMiB, 10,
                     [] { return refused([] { parse_gbnf(regex_to_gbnf("(a{9999}){9999}")); }, "grammar"); }),
            "");
}

TEST(GrammarBudget, ExponentialAllOfOverRefsIsRefused) {
  const auto schema = exponential_allof_schema(25);
  ASSERT_LT(schema.dump().size(), 2048u);
  EXPECT_EQ(isolated(64 * kMiB, 10, [&] { return refused([&] { json_schema_to_gbnf(schema); }, "json schema"); }), "");
}

TEST(GrammarBudget, LongNullableChainCompilesInLinearWork) {
  const std::string text = nullable_chain(100000);
  EXPECT_EQ(isolated(512 * kMiB, 10,
                     [&]() -> std::string {
                       // 100000 rules take more memory than the default budget allows.
                       WorkBudget budget(BudgetLimits{BudgetLimits{}.steps, 256 * kMiB});
                       const auto g = parse_gbnf(text, "root", &budget);
                       if (!grammar_accepts(*g, "")) return "the chain should derive the empty string";
                       // A rule's own cost (GrammarBuilder::kRuleSteps) and a handful more per rule,
                       // not one per rule per pass (10^10).
                       if (budget.steps_used() > (GrammarBuilder::kRuleSteps + 100) * 100000)
                         return "quadratic: " + std::to_string(budget.steps_used()) + " steps";
                       return "";
                     }),
            "");
}

TEST(GrammarBudget, ManyLargeRepetitionsAreRefusedBeforeTheirMemoryIsAllocated) {
  // 25 x "a"{0,100000}: 2.5 M helper rules; used to allocate ~116 MB before the element limit.
  std::string text = "root ::=";
  for (int i = 0; i < 25; ++i) text += " \"a\"{0,100000}";
  EXPECT_EQ(isolated(96 * kMiB, 10, [&] { return refused([&] { parse_gbnf(text + "\n"); }, "memory"); }), "");
}

TEST(GrammarBudget, DefaultsLeaveRoomForTheConvertersOwnLimits) {
  // maxLength 100000 is the schema converter's documented limit: it must fit the default budget.
  WorkBudget budget;
  const auto g = parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type": "string", "maxLength": 100000})"),
                                                {}, &budget),
                            "root", &budget);
  EXPECT_TRUE(grammar_accepts(*g, "\"xyz\""));
  EXPECT_LT(budget.bytes_used(), budget.limits().bytes);
}

TEST(GrammarBudget, QuadraticNullableSequenceInRegexIsBounded) {
  // (a?a?...a?)+ with 4000 optional items: "without the empty string" was written out with a
  // copy of the rest of the sequence per item (16 M items of text).
  std::string re = "(";
  for (int i = 0; i < 4000; ++i) re += "a?";
  re += ")+";
  EXPECT_EQ(isolated(64 * kMiB, 10,
                     [&]() -> std::string {
                       try {
                         const auto g = parse_gbnf(regex_to_gbnf(re));
                         return grammar_accepts(*g, "aaa") && !grammar_accepts(*g, "b") ? "" : "wrong language";
                       } catch (const Error& e) {
                         return std::string(e.what()).find("regex") != std::string::npos ? "" : e.what();
                       }
                     }),
            "");
}

TEST(GrammarBudget, NullableSequenceInAlternationOrCountIsWrittenInLinearText) {
  // (d|a?a?...a?) and (a?a?...a?){2}: each is written without the empty string, which spelled out
  // the rest of the sequence once per item (quadratic; fuzz_grammar_budget found 200 items
  // refused after 16 MB). Shared tails as helper rules keep the GBNF linear, and it compiles.
  // The language is checked on 40 items (matching is slow on thousands: every position has
  // an alternative per item left).
  auto items = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "a?";
    return s;
  };
  for (const bool count : {false, true}) {
    SCOPED_TRACE(count ? "(a?...){2}" : "(d|a?...)");
    auto pattern = [&](int n) { return count ? "(" + items(n) + "){2}" : "(d|" + items(n) + ")"; };
    EXPECT_EQ(isolated(256 * kMiB, 20,
                       [&]() -> std::string {
                         const std::string gbnf = regex_to_gbnf(pattern(3000));
                         if (gbnf.size() > 64 * 3000) return "GBNF of " + std::to_string(gbnf.size()) + " bytes";
                         parse_gbnf(gbnf);
                         const auto g = parse_gbnf(regex_to_gbnf(pattern(40)));
                         const size_t most = count ? 80 : 40;
                         if (!grammar_accepts(*g, "") || !grammar_accepts(*g, "aaa") || grammar_accepts(*g, "b") ||
                             !grammar_accepts(*g, std::string(most, 'a')) ||
                             grammar_accepts(*g, std::string(most + 1, 'a')) || grammar_accepts(*g, "da") ||
                             count == grammar_accepts(*g, "d"))
                           return "wrong language";
                         return "";
                       }),
              "");
  }
}

TEST(GrammarBudget, ExhaustionNamesTheComponentAndTheLimit) {
  WorkBudget small(BudgetLimits{1000, 1 << 30});
  try {
    parse_gbnf(nullable_chain(5000), "root", &small);
    FAIL() << "a 5000-rule grammar fits 1000 steps";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("grammar"), std::string::npos) << what;
    EXPECT_NE(what.find("1000 steps"), std::string::npos) << what;
  }
  WorkBudget tight(BudgetLimits{1u << 30, 256});
  try {
    json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"a": {"type": "string"}}})"),
                        JsonSchemaOptions{}, &tight);
    FAIL() << "a schema's grammar fits 256 bytes";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("json schema"), std::string::npos) << what;
    EXPECT_NE(what.find("256 bytes"), std::string::npos) << what;
  }
}

TEST(GrammarBudget, CancellationStopsTheWork) {
  int polls = 0;
  WorkBudget budget(BudgetLimits{}, [&] { return ++polls > 3; });
  try {
    json_schema_to_gbnf(exponential_allof_schema(25), JsonSchemaOptions{}, &budget);
    FAIL() << "not cancelled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos) << e.what();
  }
  EXPECT_GT(polls, 3);
  EXPECT_TRUE(budget.cancelled());
}

// A grammar's mask cache keeps at most its byte limit; masks past it are computed each time and
// are the same.
TEST(GrammarBudget, MaskCacheStaysWithinItsBytesAndMasksAreUnchanged) {
  std::vector<std::string> bytes = {""};  // 0: end of sequence
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* w : {"{\"", "\":", "\",", "\"}", "true", "null", "12", "ab", "[]", "name", "age"}) bytes.push_back(w);
  const auto vocab = std::make_shared<TokenVocabulary>(bytes, std::vector<std::pair<std::string, int32_t>>{});
  const auto g = parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"},
          "tags": {"type": "array", "items": {"type": "boolean"}}}, "required": ["name", "age", "tags"]})")));
  const auto full = std::make_shared<TokenGrammar>(g, vocab);
  const auto small = std::make_shared<TokenGrammar>(g, vocab, 1024);
  GrammarMatcher a(full, {0}), b(small, {0});
  std::vector<uint64_t> ma(static_cast<size_t>(a.mask_words())), mb(ma.size());
  uint32_t pick = 7;
  for (int step = 0; step < 40 && !a.finished(); ++step) {
    std::fill(ma.begin(), ma.end(), 0);
    std::fill(mb.begin(), mb.end(), 0);
    a.fill_mask(ma.data());
    b.fill_mask(mb.data());
    ASSERT_EQ(ma, mb) << "step " << step;
    std::vector<int32_t> allowed;
    for (int32_t id = 1; id < vocab->size(); ++id)
      if ((ma[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1) allowed.push_back(id);
    if (allowed.empty()) break;
    pick = pick * 1103515245u + 12345u;
    const int32_t t = allowed[(pick >> 8) % allowed.size()];
    ASSERT_TRUE(a.accept(t));
    ASSERT_TRUE(b.accept(t));
  }
  EXPECT_GT(full->cached_bytes(), 1024u);
  EXPECT_LE(small->cached_bytes(), 1024u);
  EXPECT_GE(small->footprint(), small->cached_bytes() + g->elements.size() * sizeof(Element));
}

// Every input in fuzz/regressions/grammar_budget (the hostile inputs above, and whatever
// fuzz_grammar_budget finds: a kind byte, 0 GBNF, 1 JSON schema, 2 regex, then the text) compiles
// or is refused under the default budget, within the fuzzing oracle's memory.
// The child's CPU-time cap is the oracle's safety net, not the budget under test (1 s of the
// compile's own thread time): AddressSanitizer's instrumentation and a loaded machine make the
// slowest seed take close to 10 s of CPU there, so the cap is wider under it.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kIsolatedCpuSeconds = 30;
#else
constexpr int kIsolatedCpuSeconds = 10;
#endif

TEST(FuzzRegressions, GrammarBudgetInputs) {
  const std::filesystem::path dir = std::filesystem::path(LFM_SOURCE_DIR) / "fuzz/regressions/grammar_budget";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_GE(files.size(), 1u);
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.empty()) continue;
    const std::string text = bytes.substr(1);
    EXPECT_EQ(isolated(64 * kMiB, kIsolatedCpuSeconds,
                       [&]() -> std::string {
                         try {
                           WorkBudget budget;
                           if (bytes[0] % 3 == 0) parse_gbnf(text, "root", &budget);
                           else if (bytes[0] % 3 == 1)
                             parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(text), {}, &budget), "root", &budget);
                           else parse_gbnf(regex_to_gbnf(text, &budget), "root", &budget);
                         } catch (const Error&) {
                         } catch (const nlohmann::json::exception&) {
                         }
                         return "";
                       }),
              "")
        << f;
  }
}

}  // namespace
}  // namespace lfm::grammar
