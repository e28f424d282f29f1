#include "server/api_types.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/ordered_json_parse.h"

namespace lfm::server {

// The body as parse_json_body parsed it: ordered, so schemas, tools, template variables and
// tool-call arguments reach the template and the grammar in the client's key order.
using json = nlohmann::ordered_json;
using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "'" + param + "' " + message, param);
}

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* name, double lo, double hi, double fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) bad(name, "must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) bad(name, "must be between " + json(lo).dump() + " and " + json(hi).dump());
  return d;
}

int64_t integer(const json& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer()) bad(name, "must be an integer");
  const int64_t i = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : v->get<int64_t>();
  if (i < lo || i > hi) bad(name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return i;
}

bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(name, "must be true or false");
  return v->get<bool>();
}

GenerationParams generation(const json& body, int64_t vocab, bool chat, const SamplingDefaults& d) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  GenerationParams g;
  SamplingParams& s = g.req.sampling;
  s.temperature = static_cast<float>(number(body, "temperature", 0, 2, d.temperature.value_or(1.0f)));
  s.top_p = static_cast<float>(number(body, "top_p", 0, 1, d.top_p.value_or(1.0f)));
  if (s.top_p == 0.0f) s.top_p = 1e-6f;  // OpenAI accepts 0: only the most likely token
  s.top_k = static_cast<int>(integer(body, "top_k", -1, 1 << 30, d.top_k.value_or(0)));
  if (s.top_k < 0) s.top_k = 0;  // -1: off, as vLLM spells it
  s.min_p = static_cast<float>(number(body, "min_p", 0, 0.999999, d.min_p.value_or(0.0f)));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2, 2, 0.0));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2, 2, 0.0));
  s.repetition_penalty =
      static_cast<float>(number(body, "repetition_penalty", 0.01, 100, d.repetition_penalty.value_or(1.0f)));
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) bad("seed", "must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  }
  if (const json* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) bad("logit_bias", "must be an object mapping token ids to biases");
    for (const auto& [key, value] : lb->items()) {
      // Decimal digits only: std::stoll would also take " 5", "+5" or "-0".
      size_t used = 0;
      long long id = -1;
      const bool digits = !key.empty() && key.size() <= 18 &&
                          std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (digits) id = std::stoll(key, &used);
      if (!digits || used != key.size() || id < 0 || id >= vocab)
        bad("logit_bias", "key '" + key + "' is not a token id in [0, " + std::to_string(vocab) + ")");
      if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100)
        bad("logit_bias", "value for token " + key + " must be a number between -100 and 100");
      s.logit_bias.push_back({static_cast<int32_t>(id), value.get<float>()});
    }
  }
  if (chat) {
    g.logprobs = boolean(body, "logprobs", false);
    g.top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 20, 0));
    if (g.top_logprobs > 0 && !g.logprobs) bad("top_logprobs", "requires 'logprobs': true");
  } else if (const json* lp = field(body, "logprobs")) {  // completions: an integer count
    if (!lp->is_number_integer() || lp->get<int64_t>() < 0 || lp->get<int64_t>() > 20)
      bad("logprobs", "must be an integer between 0 and 20");
    g.logprobs = true;
    g.top_logprobs = lp->get<int>();
  }
  s.logprobs = g.logprobs;
  s.top_logprobs = g.top_logprobs;
  const json* mt = field(body, "max_completion_tokens");
  const char* mt_name = "max_completion_tokens";
  if (!mt) {
    mt = field(body, "max_tokens");
    mt_name = "max_tokens";
  }
  if (mt) {
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1) bad(mt_name, "must be a positive integer");
    g.max_tokens = mt->get<int64_t>();
  }
  g.n = static_cast<int>(integer(body, "n", 1, kMaxChoices, 1));
  g.best_of = static_cast<int>(integer(body, "best_of", 1, kMaxChoices, g.n));
  if (g.best_of < g.n) bad("best_of", "must be at least n (" + std::to_string(g.n) + ")");
  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      g.req.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 16) bad("stop", "may hold at most 16 strings");
      for (const auto& x : *stop) {
        if (!x.is_string()) bad("stop", "must be a string or an array of strings");
        g.req.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "must be a string or an array of strings");
    }
  }
  g.req.ignore_eos = boolean(body, "ignore_eos", false);
  if (const json* spec = field(body, "speculative")) {
    if (!spec->is_object()) bad("speculative", "must be an object such as {\"draft\": \"ngram\", \"max_drafts\": 8}");
    if (const json* d = field(*spec, "draft")) {
      if (!d->is_string()) bad("speculative.draft", "must be \"ngram\", \"model\" or \"none\"");
      try {
        g.drafter = parse_drafter(d->get<std::string>());
      } catch (const std::exception&) {
        bad("speculative.draft", "must be \"ngram\", \"model\" or \"none\", got \"" + d->get<std::string>() + "\"");
      }
    }
    if (field(*spec, "max_drafts")) g.max_drafts = integer(*spec, "max_drafts", 1, 64, 8);
    for (const auto& [key, value] : spec->items())
      if (key != "draft" && key != "max_drafts") bad("speculative." + key, "is not a known field (draft, max_drafts)");
  }
  g.stream = boolean(body, "stream", false);
  if (g.stream && g.best_of > g.n) bad("best_of", "must equal n when streaming (the best are known only at the end)");
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "must be an object");
    g.include_usage = boolean(*so, "include_usage", false);
  }
  return g;
}

// A message's content for the template: a string (a string, null, or text parts joined), or,
// when it has image or audio parts, the parts in order as {"type": "text", "text": …},
// {"type": "image"} (the model's template writes its placeholder; the URL goes to `images`) and
// {"type": "audio"} (the chat turn writes the audio placeholder; the data goes to `audios`).
ojson message_content(const json& content, const std::string& param, bool images_allowed, std::vector<ImagePart>& images,
                      std::vector<AudioPart>& audios) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, "must be a string or an array of content parts");
  std::string text;
  ojson parts = ojson::array();
  bool any_image = false;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string p = param + "[" + std::to_string(j) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) bad(p, "must be an object with a 'type'");
    const std::string type = part["type"].get<std::string>();
    if (type == "text") {
      if (!part.contains("text") || !part["text"].is_string()) bad(p + ".text", "must be a string");
      text += part["text"].get<std::string>();
      parts.push_back({{"type", "text"}, {"text", part["text"].get<std::string>()}});
      continue;
    }
    if (type == "input_audio") {
      // OpenAI's {"type": "input_audio", "input_audio": {"data": base64, "format": "wav" | "mp3" | …}}.
      auto ia = part.find("input_audio");
      if (ia == part.end() || !ia->is_object())
        bad(p + ".input_audio", "must be an object {\"data\": base64 audio, \"format\": \"wav\"}");
      auto data = ia->find("data");
      if (data == ia->end() || !data->is_string()) bad(p + ".input_audio.data", "must be a string (base64 audio bytes)");
      std::string format;
      if (auto f = ia->find("format"); f != ia->end() && !f->is_null()) {
        if (!f->is_string()) bad(p + ".input_audio.format", "must be a string");
        format = f->get<std::string>();
      }
      if (!images_allowed) bad(p, "is an audio part; audio is accepted in user messages only");
      audios.push_back({data->get<std::string>(), format, p + ".input_audio"});
      parts.push_back({{"type", "audio"}});
      any_image = true;
      continue;
    }
    if (type != "image_url" && type != "image")
      bad(p + ".type", "'" + type + "' is not supported (text, image_url, input_audio)");
    // OpenAI's {"type": "image_url", "image_url": {"url": …, "detail": …}}; also a bare string
    // there, and {"type": "image", "url" | "image" | "image_url": …} as Hugging Face writes it.
    std::string where;
    const json* url = nullptr;
    for (const char* key : {"image_url", "url", "image"}) {
      auto it = part.find(key);
      if (it == part.end() || it->is_null() || (type == "image_url" && std::string(key) != "image_url")) continue;
      where = p + "." + key;
      if (it->is_string()) {
        url = &*it;
      } else if (std::string(key) == "image_url" && it->is_object()) {
        auto u = it->find("url");
        if (u == it->end() || !u->is_string()) bad(where + ".url", "must be a string (a data:image/…;base64 URI)");
        url = &*u;
      } else {
        bad(where, "must be an object {\"url\": …} or a URL string");
      }
      break;
    }
    if (!url) bad(p + ".image_url", "must be an object {\"url\": \"data:image/png;base64,…\"}");
    if (!images_allowed) bad(p, "is an image part; images are accepted in user messages only");
    images.push_back({url->get<std::string>(), where});
    parts.push_back({{"type", "image"}});
    any_image = true;
  }
  if (any_image) return parts;
  return text;
}

}  // namespace

std::string python_literal(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "None";
    case ojson::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case ojson::value_t::array: {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + python_literal(v[i]);
      return s + "]";
    }
    case ojson::value_t::object: {
      std::string s = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        s += (first ? "" : ", ") + ojson(k).dump() + ": " + python_literal(x);
        first = false;
      }
      return s + "}";
    }
    default: return v.dump();  // numbers, and strings (JSON escapes are valid Python escapes)
  }
}

ChatParams parse_chat_request(const json& body, int64_t vocab, const SamplingDefaults& defaults) {
  ChatParams c;
  c.gen = generation(body, vocab, true, defaults);
  const json* msgs = field(body, "messages");
  if (!msgs || !msgs->is_array() || msgs->empty()) bad("messages", "must be a non-empty array");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(p, "must be an object");
    if (!m.contains("role") || !m["role"].is_string()) bad(p + ".role", "must be a string");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      bad(p + ".role", "'" + role + "' is not one of system, developer, user, assistant, tool");
    ojson content = message_content(m.contains("content") ? m["content"] : json(), p + ".content", role == "user",
                                    c.images, c.audios);
    std::string text = content.is_string() ? content.get<std::string>() : std::string();
    if (role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      const json& calls = m["tool_calls"];
      if (!calls.is_array()) bad(p + ".tool_calls", "must be an array");
      std::string block;
      for (size_t j = 0; j < calls.size(); ++j) {
        const std::string q = p + ".tool_calls[" + std::to_string(j) + "]";
        const json& f = calls[j].is_object() && calls[j].contains("function") ? calls[j]["function"] : json();
        if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) bad(q + ".function.name", "must be a string");
        ojson args = ojson::object();
        if (f.contains("arguments") && !f["arguments"].is_null()) {
          const std::string where = q + ".function.arguments";
          if (f["arguments"].is_string()) {
            // A second JSON text inside the body: parsed as the body is (linear, capped).
            try {
              args = parse_request_json(f["arguments"].get_ref<const std::string&>(), "a string in the request body", where);
            } catch (const JsonFieldError& e) {
              throw ApiError(400, e.what(), e.field());
            } catch (const lfm::Error& e) {
              bad(where, std::string("must be a JSON object (or a string holding one): ") + e.what());
            }
          } else {
            args = f["arguments"];
          }
          if (!args.is_object()) bad(where, "must be a JSON object (or a string holding one)");
        }
        std::string call = f["name"].get<std::string>() + "(";
        bool first = true;
        for (const auto& [k, v] : args.items()) {
          call += (first ? "" : ", ") + k + "=" + python_literal(v);
          first = false;
        }
        block += (j ? ", " : "") + call + ")";
      }
      if (!calls.empty()) text += "<|tool_call_start|>[" + block + "]<|tool_call_end|>";
    }
    ojson out = ojson::object();
    out["role"] = role == "developer" ? "system" : role;
    if (role == "assistant" && m.contains("audio") && !m["audio"].is_null()) {
      // OpenAI's reference to an earlier response's audio: the stored spoken reply stands for the
      // whole turn, text included.
      const json& a = m["audio"];
      if (!a.is_object() || !a.contains("id") || !a["id"].is_string() || a["id"].get_ref<const std::string&>().empty())
        bad(p + ".audio.id", "must be a string (the id of an earlier response's audio)");
      c.spoken.push_back({a["id"].get<std::string>(), p + ".audio.id"});
      content = ojson::array({{{"type", "spoken"}}});
    }
    if (content.is_array())
      out["content"] = std::move(content);
    else
      out["content"] = text;
    if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) out["tool_call_id"] = m["tool_call_id"];
    if (m.contains("name") && m["name"].is_string()) out["name"] = m["name"];
    c.messages.push_back(std::move(out));
  }
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) bad("tools", "must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
          !t["function"]["name"].is_string())
        bad(p + ".function.name", "must be a string");
    }
    if (!tools->empty()) c.tools = *tools;
  }
  if (const json* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      c.tool_choice = tc->get<std::string>();
      if (c.tool_choice != "auto" && c.tool_choice != "none" && c.tool_choice != "required")
        bad("tool_choice", "must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": {\"name\": …}}");
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      c.tool_choice = (*tc)["function"]["name"].get<std::string>();
      c.named_tool = true;
    } else {
      bad("tool_choice", "must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": {\"name\": …}}");
    }
    if ((c.tool_choice == "required" || c.named_tool) && c.tools.is_null())
      bad("tool_choice", "needs 'tools'");
    if (c.named_tool) {
      bool found = false;
      for (const auto& t : c.tools) found = found || t["function"]["name"] == c.tool_choice;
      if (!found) bad("tool_choice", "names function '" + c.tool_choice + "', which is not in 'tools'");
    }
  }
  if (c.tool_choice == "none") c.tools = nullptr;
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "must be an object");
    c.template_kwargs = *kw;
  }
  return c;
}

CompletionParams parse_completion_request(const json& body, int64_t vocab, const SamplingDefaults& defaults) {
  CompletionParams c;
  c.gen = generation(body, vocab, false, defaults);
  const json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "is required");
  auto ids_of = [&](const json& list, const std::string& param) {
    CompletionPrompt p;
    for (const auto& t : list) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
        bad(param, "token ids must be integers in [0, " + std::to_string(vocab) + ")");
      p.ids.push_back(t.get<int32_t>());
    }
    return p;
  };
  const char* shape = "must be a string, an array of token ids, or an array of strings or of token-id arrays";
  if (prompt->is_string()) {
    c.prompts.push_back({prompt->get<std::string>(), {}});
  } else if (!prompt->is_array() || prompt->empty()) {
    bad("prompt", shape);
  } else if ((*prompt)[0].is_number_integer()) {
    c.prompts.push_back(ids_of(*prompt, "prompt"));
  } else {
    if (prompt->size() > kMaxPrompts) bad("prompt", "may hold at most " + std::to_string(kMaxPrompts) + " prompts");
    for (size_t i = 0; i < prompt->size(); ++i) {
      const json& p = (*prompt)[i];
      const std::string param = "prompt[" + std::to_string(i) + "]";
      if (p.is_string())
        c.prompts.push_back({p.get<std::string>(), {}});
      else if (p.is_array() && !p.empty())
        c.prompts.push_back(ids_of(p, param));
      else
        bad(param, "must be a string or a non-empty array of token ids");
    }
  }
  if (c.prompts.size() * static_cast<size_t>(c.gen.best_of) > kMaxPrompts)
    bad("prompt", "times best_of (or n) makes more than " + std::to_string(kMaxPrompts) + " generations");
  c.echo = boolean(body, "echo", false);
  if (c.echo && c.gen.logprobs) bad("echo", "with logprobs is not supported (prompt logprobs are not computed)");
  if (field(body, "suffix")) bad("suffix", "is not supported");
  return c;
}

}  // namespace lfm::server
