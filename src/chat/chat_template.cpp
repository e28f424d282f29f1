// Chat-template loading and rendering with transformers' environment. See chat_template.h.
#include "chat/chat_template.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/jinja_eval.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json_guard.h"

namespace lfm {
namespace {

std::string read_file(const std::filesystem::path& p) { return read_regular_file(p.string(), "chat template:"); }

std::optional<std::string> token_text(const nlohmann::ordered_json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const auto& t = cfg[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
  fail("chat template: tokenizer_config.json '", key, "' is neither a string nor {\"content\": ...}: ", json_excerpt(t));
}

// Pinned date for strftime_now, validated as YYYY-MM-DD.
std::tm pinned_tm(const std::string& date) {
  std::tm tm{};
  int y = 0, m = 0, d = 0;
  char tail = 0;
  LFM_CHECK(date.size() == 10 && std::sscanf(date.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) == 3 && m >= 1 &&
                m <= 12 && d >= 1 && d <= 31,
            "chat template: date '", date, "' is not YYYY-MM-DD");
  tm.tm_year = y - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  tm.tm_isdst = -1;
  std::tm copy = tm;
  // timegm normalizes and fills tm_wday/tm_yday, as Python's timetuple() does.
  const time_t t = timegm(&copy);
  std::tm out{};
  gmtime_r(&t, &out);
  LFM_CHECK(out.tm_mday == d && out.tm_mon == m - 1, "chat template: date '", date, "' does not exist");
  out.tm_isdst = -1;
  return out;
}

// datetime.strftime: %f/%z/%Z are handled by Python itself (naive datetime: "", ""), the rest
// by the C library in the C locale.
std::string py_strftime(const std::string& fmt, const std::tm& tm, long micros) {
  std::string f;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] == '%' && i + 1 < fmt.size()) {
      const char c = fmt[i + 1];
      if (c == 'f') {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%06ld", micros);
        f += buf;
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      f += fmt.substr(i, 2);
      ++i;
      continue;
    }
    f.push_back(fmt[i]);
  }
  if (f.empty()) return "";
  std::string out(256 + f.size() * 8, '\0');
  const size_t n = std::strftime(out.data(), out.size(), f.c_str(), &tm);
  out.resize(n);
  return out;
}

}  // namespace

ChatTemplateSource load_chat_template_source(const std::string& model_path) {
  namespace fs = std::filesystem;
  if (model_path.size() >= 5 && model_path.compare(model_path.size() - 5, 5, ".gguf") == 0)
    fail("chat template: '", model_path,
         "' is a GGUF file; its template comes through the tokenizer (TokenizerSpec.chat_template), not from a folder");
  const fs::path dir(model_path);
  LFM_CHECK(fs::is_directory(dir), "chat template: '", model_path, "' is not a model folder");
  ChatTemplateSource src;
  nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
  const fs::path cfg_path = dir / "tokenizer_config.json";
  if (fs::exists(cfg_path)) {
    cfg = parse_ordered_json(read_file(cfg_path), cat("chat template: ", cfg_path.string()));
    LFM_CHECK(cfg.is_object(), "chat template: ", cfg_path.string(), " is not a JSON object");
  }
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (fs::exists(jinja_path)) {
    src.template_text = read_file(jinja_path);
    src.origin = jinja_path.string();
  } else if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
    src.template_text = cfg["chat_template"].get<std::string>();
    src.origin = cfg_path.string() + " (chat_template)";
  } else if (cfg.contains("chat_template") && cfg["chat_template"].is_array() && !cfg["chat_template"].empty()) {
    const nlohmann::ordered_json* pick = nullptr;
    for (const auto& e : cfg["chat_template"])
      if (e.is_object() && e.value("name", "") == "default") pick = &e;
    if (!pick) pick = &cfg["chat_template"][0];
    LFM_CHECK(pick->is_object() && pick->contains("template") && (*pick)["template"].is_string(),
              "chat template: malformed chat_template list entry in ", cfg_path.string());
    src.template_text = (*pick)["template"].get<std::string>();
    src.origin = cfg_path.string() + " (chat_template '" + pick->value("name", "") + "')";
  } else {
    fail("chat template: no chat_template.jinja and no chat_template in tokenizer_config.json under '", model_path, "'");
  }
  src.bos_token = token_text(cfg, "bos_token");
  src.eos_token = token_text(cfg, "eos_token");
  src.pad_token = token_text(cfg, "pad_token");
  return src;
}

ChatTemplate::ChatTemplate(const std::string& source, std::optional<std::string> bos_token,
                           std::optional<std::string> eos_token, std::optional<std::string> pad_token)
    : bos_(std::move(bos_token)), eos_(std::move(eos_token)), pad_(std::move(pad_token)) {
  try {
    tpl_ = std::make_unique<jinja::Template>(source);
  } catch (const jinja::TemplateError& e) {
    fail("chat template: ", e.what());
  }
}

ChatTemplate::ChatTemplate(const ChatTemplateSource& src)
    : ChatTemplate(src.template_text, src.bos_token, src.eos_token, src.pad_token) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra_vars,
                                 const std::optional<std::string>& date) const {
  using jinja::Value;
  LFM_CHECK(extra_vars.is_object() || extra_vars.is_null(), "chat template: extra variables must be a JSON object");
  // transformers accepts tools only as JSON-schema dicts (or Python functions) and raises otherwise.
  LFM_CHECK(tools.is_null() || tools.is_array(), "chat template: tools must be a list of tool schemas, got ", tools.type_name());
  if (tools.is_array())
    for (const auto& t : tools)
      LFM_CHECK(t.is_object(), "chat template: each tool must be a JSON object (a JSON schema), got ", json_excerpt(t));
  std::optional<std::tm> pinned;
  if (date) pinned = pinned_tm(*date);

  // transformers: render(messages=..., tools=..., documents=..., add_generation_prompt=...,
  //                      **{**special_tokens_map, **kwargs})
  jinja::VarList vars;
  vars.emplace_back("messages", jinja::from_json(messages));
  vars.emplace_back("tools", jinja::from_json(tools));
  vars.emplace_back("documents", Value::none());
  vars.emplace_back("add_generation_prompt", Value::boolean(add_generation_prompt));
  // Setting a variable again replaces it; only the first `scan` variables are searched. extra_vars
  // searches those set before it: a JSON object's keys are unique, so it never repeats one of its
  // own, and searching everything would be quadratic in its keys.
  auto set_var = [&vars](const std::string& k, Value v, size_t scan) {
    for (size_t i = 0; i < scan; ++i)
      if (vars[i].first == k) {
        vars[i].second = std::move(v);
        return;
      }
    vars.emplace_back(k, std::move(v));
  };
  if (bos_) set_var("bos_token", Value::string(*bos_), vars.size());
  if (eos_) set_var("eos_token", Value::string(*eos_), vars.size());
  if (pad_) set_var("pad_token", Value::string(*pad_), vars.size());
  const size_t named = vars.size();
  if (extra_vars.is_object()) {
    for (auto it = extra_vars.begin(); it != extra_vars.end(); ++it) {
      const std::string& k = it.key();
      LFM_CHECK(k != "messages" && k != "tools" && k != "documents" && k != "add_generation_prompt",
                "chat template: extra variable '", k, "' collides with a render argument");
      set_var(k, jinja::from_json(it.value()), named);
    }
  }

  jinja::VarList globals;
  globals.emplace_back("raise_exception", jinja::make_callable("raise_exception", "function", [](const jinja::CallArgs& a) -> Value {
    a.check("raise_exception", 1, {"message"});
    throw jinja::TemplateError(jinja::to_str(a.get(0, "message")));
  }));
  globals.emplace_back("strftime_now", jinja::make_callable("strftime_now", "function", [pinned](const jinja::CallArgs& a) {
    a.check("strftime_now", 1, {"format"});
    const Value fmt = a.get(0, "format");
    if (!fmt.is_string()) jinja::template_fail("strftime() argument 1 must be str, not ", fmt.type_name());
    if (pinned) return Value::string(py_strftime(fmt.str(), *pinned, 0));
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    std::tm now{};
    localtime_r(&ts.tv_sec, &now);
    return Value::string(py_strftime(fmt.str(), now, ts.tv_nsec / 1000));
  }));
  try {
    return tpl_->render(vars, globals);
  } catch (const jinja::TemplateError& e) {
    fail("chat template: ", e.what());
  }
}

}  // namespace lfm
