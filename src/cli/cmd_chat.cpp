// lfm chat: an interactive conversation with the model's own chat template, streamed as it is
// generated. Multi-turn prompts reuse the sequence state: when the newly rendered conversation
// extends the tokens already in the cache, only the new tokens are fed (the conv state cannot be
// rewound, so anything else re-prefills from scratch).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "engine/token_mask.h"
#include "model/forward.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/streaming_detokenizer.h"

namespace lfm::cli {
namespace {

std::optional<std::string> opt_str(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

int run_chat(int argc, char** argv) {
  CLI::App app{
      "Chat with a model interactively (reads user turns from stdin, one per line; /reset starts over, "
      "/exit or end of input quits)."};
  configure_app(app);
  std::string model, system_prompt;
  SamplerParams sp;
  int64_t max_new = 1024, ctx = 8192;
  int threads = 0;
  bool show_reasoning = false;
  std::vector<std::string> vars;
  std::string date;
  app.add_option("-m,--model", model, "Model: Hugging Face folder (with tokenizer files) or .gguf file")->required();
  app.add_option("-s,--system", system_prompt, "System prompt");
  app.add_option("-n,--max-new-tokens", max_new, "Most tokens per reply")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--temperature", sp.temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", sp.top_k, "Keep the k most likely tokens (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", sp.top_p, "Nucleus sampling mass (1: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--min-p", sp.min_p, "Min-p filter")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", sp.seed, "Random seed")->capture_default_str();
  app.add_option("-c,--ctx-size", ctx, "Context size (tokens)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--var", vars, "Extra template variable name=JSON (e.g. keep_past_thinking=true); repeatable");
  app.add_option("--date", date, "Pin strftime_now to YYYY-MM-DD");
  app.add_flag("--show-reasoning", show_reasoning, "Print <think> reasoning (dimmed) as well as the answer");
  LFM_CLI_PARSE(app, argc, argv);

  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const auto& v : vars) {
    const auto eq = v.find('=');
    LFM_CHECK(eq != std::string::npos && eq > 0, "--var '", v, "' is not name=JSON");
    try {
      extra[v.substr(0, eq)] = nlohmann::ordered_json::parse(v.substr(eq + 1));
    } catch (const nlohmann::json::exception& e) {
      fail("--var '", v, "': the value is not JSON: ", e.what());
    }
  }
  Runtime rt = open_runtime(model, threads);
  auto tok = load_tokenizer(model);
  LFM_CHECK(!tok->chat_template().empty(),
            "chat: the model ships no chat template (chat_template.jinja, "
            "tokenizer_config.json or GGUF tokenizer.chat_template)");
  ChatTemplate tpl(tok->chat_template(), opt_str(tok->bos_token()), opt_str(tok->eos_token()),
                   opt_str(tok->pad_token()));
  std::vector<int32_t> stops = rt.model->config().eos_token_ids;
  if (tok->eos_id() >= 0) stops.push_back(tok->eos_id());
  if (auto im_end = tok->token_to_id("<|im_end|>")) stops.push_back(*im_end);

  SequenceState state(rt.model->config(), ctx);
  Forward fwd(*rt.model, *rt.backend);
  Sampler sampler(sp);
  sampler.set_allowed(decodable_token_mask(*tok, rt.model->config().vocab_size));
  std::vector<int32_t> cached;  // the tokens whose state `state` holds
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", system_prompt}});
  const bool tty = isatty(fileno(stdout));

  std::string line;
  while (true) {
    if (isatty(fileno(stdin))) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      messages.erase(messages.begin() + (system_prompt.empty() ? 0 : 1), messages.end());
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    std::vector<int32_t> prompt;
    try {
      const std::string text = tpl.render(messages, nullptr, true, extra, opt_str(date));
      prompt = tok->encode(text, /*add_special=*/false);  // the template writes its own BOS
      LFM_CHECK(static_cast<int64_t>(prompt.size()) + 1 < ctx, "chat: the conversation has ", prompt.size(),
                " tokens, past the context size ", ctx, " (use /reset or a larger --ctx-size)");
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      messages.erase(messages.end() - 1);
      continue;
    }
    // Feed only what the cache does not already hold.
    const bool extends = cached.size() <= prompt.size() && std::equal(cached.begin(), cached.end(), prompt.begin());
    if (!extends || cached.size() == prompt.size()) {
      state.reset();
      cached.clear();
    }
    StepOutput out;
    BatchItem item{&state, std::span<const int32_t>(prompt.data() + cached.size(), prompt.size() - cached.size()),
                   false};
    fwd.step(std::span<const BatchItem>(&item, 1), out);
    cached = prompt;

    StreamingDetokenizer detok(*tok, /*skip_special=*/true);
    chat::StreamingOutputParser parser;
    std::string reply;
    auto show = [&](const std::vector<chat::StreamEvent>& events) {
      for (const auto& e : events) {
        if (e.kind == chat::StreamEvent::Kind::kContent) {
          std::cout << e.text;
        } else if (e.kind == chat::StreamEvent::Kind::kReasoning) {
          if (show_reasoning) std::cout << (tty ? "\033[2m" : "") << e.text << (tty ? "\033[0m" : "");
        } else {
          std::cout << "\n[tool call] " << e.tool_call.dump() << "\n";
        }
      }
      std::cout << std::flush;
    };
    for (int64_t n = 0; n < max_new; ++n) {
      const int32_t id = sampler.sample(out.row(0), out.vocab);
      if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
        cached.push_back(id);
        BatchItem end_item{&state, std::span<const int32_t>(&cached.back(), 1), false};
        if (state.n_past() + 1 < ctx)
          fwd.step(std::span<const BatchItem>(&end_item, 1), out);
        else
          cached.pop_back();
        break;
      }
      const std::string piece = detok.push(id);
      reply += piece;
      show(parser.feed(piece));
      if (state.n_past() + 1 >= ctx) {
        std::fprintf(stderr, "\n[context full]\n");
        break;
      }
      cached.push_back(id);
      BatchItem next{&state, std::span<const int32_t>(&cached.back(), 1), false};
      fwd.step(std::span<const BatchItem>(&next, 1), out);
    }
    const std::string tail = detok.finish();
    reply += tail;
    show(parser.feed(tail));
    show(parser.finish());
    std::cout << "\n" << std::flush;
    messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
  return 0;
}

CommandRegistrar reg({"chat", "chat interactively with the model's chat template", run_chat});

}  // namespace
}  // namespace lfm::cli
