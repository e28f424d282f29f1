// Byte-identity of our chat-template rendering with Python jinja2 configured like transformers,
// computed live by tools/chat/render_reference.py: every LFM2 template in tests/data/assets/lfm2
// over the conversation corpus in tests/data/chat/conversations.json, plus language snippets.
// Also: loading templates from model folders and the `lfm template` subcommand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "test_util.h"
#include "core/error.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const char* kPython = "/usr/bin/python3";

struct RefResult {
  bool ok = false;
  std::string text;   // rendered prompt when ok
  std::string error;  // exception when not ok
};

// Renders every case with Python jinja2 (one process for the whole batch).
std::vector<RefResult> python_reference(const ojson& cases) {
  if (!fs::exists(kPython)) {
    ADD_FAILURE() << kPython << " is missing: run scripts/setup.sh (installs python3 and python3-jinja2)";
    return {};
  }
  const test::TempDir tmp("chat_ref");
  const std::string in = tmp.write("cases.json", cases.dump());
  const std::string script = std::string(LFM_SOURCE_DIR) + "/tools/chat/render_reference.py";
  auto [rc, out] = test::run_command(std::string(kPython) + " '" + script + "' --batch '" + in + "' 2>&1");
  if (rc != 0) {
    ADD_FAILURE() << "the jinja2 reference renderer failed (exit " << rc
                  << "); if python3-jinja2 is missing, run scripts/setup.sh\n" << out;
    return {};
  }
  std::vector<RefResult> results;
  for (const auto& r : ojson::parse(out)) {
    RefResult x;
    x.ok = r.at("ok").get<bool>();
    x.text = x.ok ? r.at("text").get<std::string>() : "";
    x.error = x.ok ? "" : r.at("error").get<std::string>();
    results.push_back(std::move(x));
  }
  return results;
}

std::optional<std::string> opt_string(const ojson& j, const char* key) {
  if (j.contains(key) && j[key].is_string()) return j[key].get<std::string>();
  return std::nullopt;
}

// Renders one reference case with our implementation; nullopt means it raised (message in *err).
std::optional<std::string> render_ours(const ojson& c, std::string* err) {
  try {
    ChatTemplate t(c.at("template").get<std::string>(), opt_string(c, "bos_token"), opt_string(c, "eos_token"),
                   opt_string(c, "pad_token"));
    return t.render(c.at("messages"), c.value("tools", ojson()), c.value("add_generation_prompt", true),
                    c.value("vars", ojson::object()), opt_string(c, "date"));
  } catch (const Error& e) {
    *err = e.what();
    return std::nullopt;
  }
}

// Compares every case; returns how many rendered successfully on both sides.
size_t compare_with_reference(const ojson& cases, const std::vector<std::string>& labels) {
  const std::vector<RefResult> ref = python_reference(cases);
  if (ref.size() != cases.size()) {
    ADD_FAILURE() << "reference returned " << ref.size() << " results for " << cases.size() << " cases";
    return 0;
  }
  size_t rendered = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string err;
    const std::optional<std::string> ours = render_ours(cases[i], &err);
    if (ref[i].ok && ours) {
      EXPECT_EQ(*ours, ref[i].text) << labels[i];
      ++rendered;
    } else if (ref[i].ok) {
      ADD_FAILURE() << labels[i] << "\njinja2 rendered but we raised: " << err;
    } else if (ours) {
      ADD_FAILURE() << labels[i] << "\njinja2 raised (" << ref[i].error << ") but we rendered:\n" << *ours;
    }
  }
  return rendered;
}

struct NamedTemplate {
  std::string label;
  std::string text;
  std::optional<std::string> bos, eos, pad;
};

std::optional<std::string> token_of(const ojson& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  if (cfg[key].is_object()) return cfg[key].at("content").get<std::string>();
  return cfg[key].get<std::string>();
}

// Every chat template shipped under tests/data/assets/lfm2.
std::vector<NamedTemplate> all_templates() {
  const fs::path root = fs::path(LFM_TEST_DATA_DIR) / "assets" / "lfm2";
  std::vector<NamedTemplate> out;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "tokenizer_config.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  const ojson lfm2_cfg = ojson::parse(test::read_file(root / "LFM2-1.2B" / "tokenizer_config.json"));
  for (const auto& d : dirs) {
    const ojson cfg = ojson::parse(test::read_file(d / "tokenizer_config.json"));
    auto add = [&](const std::string& label, const std::string& text) {
      out.push_back({label, text, token_of(cfg, "bos_token"), token_of(cfg, "eos_token"), token_of(cfg, "pad_token")});
    };
    if (fs::exists(d / "chat_template.jinja")) add(d.filename().string() + "/chat_template.jinja", test::read_file(d / "chat_template.jinja"));
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
      add(d.filename().string() + "/tokenizer_config.json", cfg["chat_template"].get<std::string>());
    if (cfg.contains("chat_template") && cfg["chat_template"].is_array())
      for (const auto& e : cfg["chat_template"])
        add(d.filename().string() + "/tokenizer_config.json:" + e.value("name", ""), e.at("template").get<std::string>());
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(root / "chat_templates"))
    if (e.path().extension() == ".jinja") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files)
    out.push_back({"chat_templates/" + f.filename().string(), test::read_file(f), token_of(lfm2_cfg, "bos_token"),
                   token_of(lfm2_cfg, "eos_token"), token_of(lfm2_cfg, "pad_token")});
  return out;
}

TEST(ChatTemplateReference, EveryLfm2TemplateMatchesJinja2OnTheCorpus) {
  const std::vector<NamedTemplate> templates = all_templates();
  ASSERT_GE(templates.size(), 8u);
  const ojson corpus = ojson::parse(test::read_file(fs::path(LFM_TEST_DATA_DIR) / "chat" / "conversations.json"));
  ASSERT_GE(corpus.size(), 30u);
  ojson cases = ojson::array();
  std::vector<std::string> labels;
  for (const auto& t : templates) {
    for (const auto& conv : corpus) {
      const ojson variants = conv.contains("vars_variants") ? conv["vars_variants"] : ojson::array({ojson::object()});
      for (const auto& vars : variants) {
        for (bool gen : {true, false}) {
          ojson c;
          c["template"] = t.text;
          c["messages"] = conv.at("messages");
          c["tools"] = conv.value("tools", ojson());
          c["add_generation_prompt"] = gen;
          c["vars"] = vars;
          c["date"] = "2025-01-15";
          if (t.bos) c["bos_token"] = *t.bos;
          if (t.eos) c["eos_token"] = *t.eos;
          if (t.pad) c["pad_token"] = *t.pad;
          cases.push_back(std::move(c));
          labels.push_back(t.label + " × " + conv.at("name").get<std::string>() + " vars=" + vars.dump() +
                           (gen ? " +generation prompt" : ""));
        }
      }
    }
  }
  const size_t rendered = compare_with_reference(cases, labels);
  std::cout << "[ chat ] " << templates.size() << " templates x " << corpus.size() << " conversations: " << cases.size()
            << " renders compared, " << rendered << " rendered text, " << cases.size() - rendered
            << " raised on both sides\n";
  // Most combinations must render text: a corpus where everything raises would prove little.
  EXPECT_GT(rendered, cases.size() * 3 / 4);
}


const ojson& snippets_file() {
  static const ojson j = ojson::parse(test::read_file(fs::path(LFM_TEST_DATA_DIR) / "chat" / "jinja_snippets.json"));
  return j;
}

TEST(JinjaReference, LanguageSnippetsMatchJinja2) {
  ASSERT_GE(snippets_file().at("snippets").size(), 200u);
  ojson cases = ojson::array();
  std::vector<std::string> labels;
  for (const auto& snippet : snippets_file().at("snippets")) {
    const std::string s = snippet.get<std::string>();
    ojson c;
    c["template"] = s;
    c["messages"] = ojson::parse(R"([{"role": "user", "content": "hi"}])");
    c["tools"] = nullptr;
    c["add_generation_prompt"] = true;
    c["vars"] = ojson::parse(R"({"ns": null})");
    c["bos_token"] = "<s>";
    c["eos_token"] = "</s>";
    c["pad_token"] = "<pad>";
    c["date"] = "2024-03-05";
    cases.push_back(std::move(c));
    labels.push_back(std::string("template: ") + s);
  }
  compare_with_reference(cases, labels);
}


// Constructs whose CPython result we cannot reproduce exactly must be refused, never guessed.
TEST(JinjaReference, UnreproducibleConstructsAreRefused) {
  for (const auto& refused : snippets_file().at("refused")) {
    const std::string s = refused.get<std::string>();
    ojson c;
    c["template"] = s;
    c["messages"] = ojson::array();
    std::string err;
    EXPECT_FALSE(render_ours(c, &err).has_value()) << s;
    EXPECT_TRUE(err.find("unsupported") != std::string::npos || err.find("too large") != std::string::npos) << err;
  }
}

TEST(ChatTemplate, LoadsModelFolder) {
  const std::string dir = std::string(LFM_TEST_DATA_DIR) + "/assets/lfm2/LFM2-350M";
  const ChatTemplateSource src = load_chat_template_source(dir);
  EXPECT_EQ(src.template_text, test::read_file(dir + "/chat_template.jinja"));
  EXPECT_EQ(src.bos_token.value_or("?"), "<|startoftext|>");
  EXPECT_EQ(src.eos_token.value_or("?"), "<|im_end|>");
  EXPECT_EQ(src.pad_token.value_or("?"), "<|pad|>");
  const ChatTemplate t(src);
  const ojson msgs = ojson::parse(R"([{"role": "system", "content": "You are a helpful assistant."},
                                       {"role": "user", "content": "What is machine learning?"}])");
  // The documented example from the LFM2 model card.
  EXPECT_EQ(t.render(msgs, nullptr, true),
            "<|startoftext|><|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nWhat is machine learning?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, LoadsTemplateFromTokenizerConfig) {
  const test::TempDir tmp("chat_cfg_model");
  const fs::path dir = tmp.path();
  std::ofstream(dir / "tokenizer_config.json") << R"({
    "bos_token": {"content": "<B>", "lstrip": false}, "eos_token": "<E>", "pad_token": null,
    "chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{{ pad_token is defined }}"}]})";
  const ChatTemplateSource src = load_chat_template_source(dir.string());
  EXPECT_FALSE(src.pad_token.has_value());
  EXPECT_EQ(ChatTemplate(src).render(ojson::parse(R"([{"role": "user", "content": "x"}])"), nullptr, true), "<B>x<E>False");
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "plain {{ messages|length }}"})";
  EXPECT_EQ(ChatTemplate(load_chat_template_source(dir.string())).render(ojson::array(), nullptr, false), "plain 0");
  std::ofstream(dir / "chat_template.jinja") << "file wins";
  EXPECT_EQ(ChatTemplate(load_chat_template_source(dir.string())).render(ojson::array(), nullptr, false), "file wins");
}

TEST(ChatTemplate, SourceErrorsNameTheProblem) {
  try {
    load_chat_template_source("/models/foo.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer"), std::string::npos) << e.what();
  }
  const test::TempDir tmp("chat_empty_model");
  const fs::path dir = tmp.path();
  EXPECT_THROW(load_chat_template_source(dir.string()), Error);
  EXPECT_THROW(ChatTemplate("{% for %}", "", "", ""), Error);
}

TEST(ChatTemplate, StrftimeNowIsPinnedByDate) {
  const ChatTemplate t("{{ strftime_now('%Y-%m-%d %A %d %B %Y') }}", std::nullopt, std::nullopt);
  EXPECT_EQ(t.render(ojson::array(), nullptr, true, ojson::object(), "2025-01-15"), "2025-01-15 Wednesday 15 January 2025");
  EXPECT_THROW(t.render(ojson::array(), nullptr, true, ojson::object(), "2025-02-30"), Error);
  EXPECT_THROW(t.render(ojson::array(), nullptr, true, ojson::object(), "15/01/2025"), Error);
  const std::string now = t.render(ojson::array(), nullptr, true);  // unpinned: today, local time
  EXPECT_TRUE(now.size() > 11 && now[4] == '-' && now[7] == '-') << now;
}

TEST(ChatTemplate, ExtraVariablesAndKeyOrder) {
  const ChatTemplate t("{{ keep_past_thinking }}|{{ tools|tojson }}|{{ bos_token }}", "<s>", std::nullopt);
  const ojson tools = ojson::parse(R"([{"zeta": 1, "alpha": {"y": 2, "b": 3}}])");
  EXPECT_EQ(t.render(ojson::array(), tools, true, ojson::parse(R"({"keep_past_thinking": true, "bos_token": "<B>"})")),
            "True|[{\"zeta\": 1, \"alpha\": {\"y\": 2, \"b\": 3}}]|<B>");
  EXPECT_THROW(t.render(ojson::array(), nullptr, true, ojson::parse(R"({"messages": 1})")), Error);
}

// ---- lfm template ----

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

TEST(ChatTemplateCli, RendersExactlyLikeTheLibrary) {
  const std::string model = std::string(LFM_TEST_DATA_DIR) + "/assets/lfm2/LFM2-350M";
  const std::string chat = std::string(LFM_TEST_DATA_DIR) + "/chat";
  const auto [rc, out] = test::run_command(std::string(LFM_BINARY) + " template -m " + shell_quote(model) + " --messages " +
                                     shell_quote(chat + "/example_messages.json") + " --tools " +
                                     shell_quote(chat + "/example_tools.json"));
  ASSERT_EQ(rc, 0) << out;
  const ChatTemplate t(load_chat_template_source(model));
  const std::string expected = t.render(ojson::parse(test::read_file(chat + "/example_messages.json")),
                                        ojson::parse(test::read_file(chat + "/example_tools.json")), true);
  EXPECT_EQ(out, expected);
}

TEST(ChatTemplateCli, VarsDateAndNoGenerationPrompt) {
  const test::TempDir tmp("chat_cli_model");
  const fs::path dir = tmp.path();
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<s>"})";
  std::ofstream(dir / "chat_template.jinja")
      << "{{ bos_token }}{{ strftime_now('%d.%m.%Y') }}|{{ flag }}|{{ obj.k }}|{{ add_generation_prompt }}";
  const fs::path msgs = dir / "m.json";
  std::ofstream(msgs) << "[]";
  const auto [rc, out] = test::run_command(std::string(LFM_BINARY) + " template -m " + shell_quote(dir.string()) +
                                     " --messages " + shell_quote(msgs.string()) +
                                     " --no-generation-prompt --date 2024-02-29 --var flag=true --var 'obj={\"k\": [1, 2]}'");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "<s>29.02.2024|True|[1, 2]|False");
}

TEST(ChatTemplateCli, TemplateErrorsExitNonZeroWithTheMessage) {
  const test::TempDir tmp("chat_cli_raise");
  const fs::path dir = tmp.path();
  std::ofstream(dir / "chat_template.jinja") << "{{ raise_exception('Only user and assistant roles are supported!') }}";
  const fs::path msgs = dir / "m.json";
  std::ofstream(msgs) << "[]";
  const auto [rc, out] = test::run_command(std::string(LFM_BINARY) + " template -m " + shell_quote(dir.string()) +
                                     " --messages " + shell_quote(msgs.string()) + " 2>&1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("Only user and assistant roles are supported!"), std::string::npos) << out;
  const auto [rc2, out2] = test::run_command(std::string(LFM_BINARY) + " template -m " + shell_quote(dir.string()) +
                                       " --messages " + shell_quote(msgs.string()) + " --var novalue 2>&1");
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("--var"), std::string::npos) << out2;
}

}  // namespace
}  // namespace lfm
