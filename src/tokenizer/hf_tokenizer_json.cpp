#include "tokenizer/hf_tokenizer_json.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "core/json_guard.h"
#include "core/limits.h"

namespace lfm {
namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer regex, used by a ByteLevel pre-tokenizer with use_regex = true.
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const json& j) {
  if (!j.is_object()) return "<not an object>";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "<no type>";
}

// A token id from JSON: an integer in [0, kMaxVocabSize), checked before it becomes an int32 or
// sizes a table (an id of 2^40 must not be cut to 32 bits, one of 2^31 - 1 must not size the vocab).
int32_t token_id(const json& v, const std::string& what) {
  const bool ok = v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() < uint64_t(limits::kMaxVocabSize)
                                                                    : v.get<int64_t>() >= 0 &&
                                                                          v.get<int64_t>() < limits::kMaxVocabSize);
  LFM_CHECK(ok, what, " has invalid id ", json_excerpt(v),
            v.is_number_integer() ? cat(" (outside [0, ", limits::kMaxVocabSize, "), lfm's vocabulary limit)") : "");
  return static_cast<int32_t>(v.get<int64_t>());
}

bool flag(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  LFM_CHECK(it->is_boolean(), "tokenizer.json: '", key, "' must be true or false, got ", json_excerpt(*it));
  return it->get<bool>();
}

// Flattens nested Sequence components ({"type":"Sequence","pretokenizers":[…]}) into a list.
void flatten(const json& j, const char* list_key, std::vector<json>& out) {
  if (j.is_null()) return;
  if (type_of(j) == "Sequence") {
    auto it = j.find(list_key);
    LFM_CHECK(it != j.end() && it->is_array(), "tokenizer.json: Sequence without '", list_key, "' array");
    for (const json& e : *it) flatten(e, list_key, out);
  } else {
    out.push_back(j);
  }
}

// Escapes a literal Split pattern ({"String": "…"}) for PCRE2.
std::string quote_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void read_normalizer(const json& j) {
  std::vector<json> parts;
  flatten(j, "normalizers", parts);
  LFM_CHECK(parts.empty(), "tokenizer.json: normalizer '", type_of(parts.empty() ? json() : parts[0]),
            "' is not supported (byte-level BPE models use none)");
}

void read_pre_tokenizer(const json& j, TokenizerSpec& spec) {
  std::vector<json> parts;
  flatten(j, "pretokenizers", parts);
  bool byte_level = false;
  for (const json& p : parts) {
    const std::string type = type_of(p);
    if (type == "Split") {
      LFM_CHECK(!byte_level, "tokenizer.json: a Split pre-tokenizer after ByteLevel is not supported");
      LFM_CHECK(spec.pretokenizer_regex.empty(), "tokenizer.json: more than one Split pre-tokenizer is not supported");
      const std::string behavior = p.value("behavior", "");
      LFM_CHECK(behavior == "Isolated", "tokenizer.json: Split behavior '", behavior, "' is not supported (only Isolated)");
      LFM_CHECK(!flag(p, "invert", false), "tokenizer.json: Split with invert = true is not supported");
      const json& pat = p.at("pattern");
      if (pat.contains("Regex")) {
        spec.pretokenizer_regex = pat.at("Regex").get<std::string>();
      } else if (pat.contains("String")) {
        spec.pretokenizer_regex = quote_regex(pat.at("String").get<std::string>());
      } else {
        fail("tokenizer.json: Split pattern must hold 'Regex' or 'String', got ", json_excerpt(pat));
      }
      LFM_CHECK(!spec.pretokenizer_regex.empty(), "tokenizer.json: Split pattern is empty");
    } else if (type == "ByteLevel") {
      byte_level = true;
      LFM_CHECK(!flag(p, "add_prefix_space", false), "tokenizer.json: ByteLevel add_prefix_space = true is not supported");
      if (flag(p, "use_regex", true)) {
        LFM_CHECK(spec.pretokenizer_regex.empty(),
                  "tokenizer.json: ByteLevel use_regex = true after a Split pre-tokenizer is not supported");
        spec.pretokenizer_regex = kGpt2Regex;
      }
    } else {
      fail("tokenizer.json: pre-tokenizer '", type, "' is not supported (expected Split and ByteLevel)");
    }
  }
  LFM_CHECK(byte_level, "tokenizer.json: the pre-tokenizer must include ByteLevel (only byte-level BPE is supported)");
}

void read_decoder(const json& j) {
  std::vector<json> parts;
  flatten(j, "decoders", parts);
  LFM_CHECK(!parts.empty(), "tokenizer.json: no decoder; a ByteLevel decoder is required");
  for (const json& d : parts) {
    LFM_CHECK(type_of(d) == "ByteLevel", "tokenizer.json: decoder '", type_of(d), "' is not supported (only ByteLevel)");
  }
}

// TemplateProcessing's "single" template: [SpecialToken?] Sequence A [SpecialToken?].
void read_post_processor(const json& j, TokenizerSpec& spec, const std::unordered_map<std::string, int32_t>& ids) {
  spec.add_bos = spec.add_eos = false;
  std::vector<json> parts;
  flatten(j, "processors", parts);
  for (const json& p : parts) {
    const std::string type = type_of(p);
    if (type == "ByteLevel") continue;  // only adjusts offsets, which lfm does not report
    LFM_CHECK(type == "TemplateProcessing", "tokenizer.json: post-processor '", type,
              "' is not supported (expected TemplateProcessing / ByteLevel)");
    const json& single = p.at("single");
    LFM_CHECK(single.is_array(), "tokenizer.json: TemplateProcessing 'single' must be an array");
    bool seen_sequence = false;
    for (const json& piece : single) {
      if (piece.contains("Sequence")) {
        LFM_CHECK(!seen_sequence, "tokenizer.json: TemplateProcessing with two sequences in 'single'");
        seen_sequence = true;
        continue;
      }
      LFM_CHECK(piece.contains("SpecialToken"), "tokenizer.json: unsupported TemplateProcessing piece ", json_excerpt(piece));
      const std::string name = piece["SpecialToken"].at("id").get<std::string>();
      // The template's special_tokens table gives the ids; fall back to the vocabulary.
      int32_t id = -1;
      if (auto st = p.find("special_tokens"); st != p.end() && st->contains(name)) {
        const json& ids_json = (*st)[name].at("ids");
        LFM_CHECK(ids_json.size() == 1, "tokenizer.json: TemplateProcessing token '", name, "' must map to one id");
        id = token_id(ids_json[0], "tokenizer.json: TemplateProcessing token '" + name + "'");
      } else if (auto it = ids.find(name); it != ids.end()) {
        id = it->second;
      }
      LFM_CHECK(id >= 0, "tokenizer.json: TemplateProcessing token '", name, "' is not in the vocabulary");
      if (!seen_sequence) {
        LFM_CHECK(!spec.add_bos, "tokenizer.json: TemplateProcessing with more than one leading special token");
        spec.add_bos = true, spec.bos_id = id, spec.bos_token = name;
      } else {
        LFM_CHECK(!spec.add_eos, "tokenizer.json: TemplateProcessing with more than one trailing special token");
        spec.add_eos = true, spec.eos_id = id, spec.eos_token = name;
      }
    }
  }
}

void read_model(const json& m, TokenizerSpec& spec, std::unordered_map<std::string, int32_t>& ids) {
  LFM_CHECK(m.is_object(), "tokenizer.json: 'model' must be an object");
  // Old files omit "type" on BPE models; recognise them by their merges.
  const std::string type = m.contains("type") ? m["type"].get<std::string>() : (m.contains("merges") ? "BPE" : "<no type>");
  LFM_CHECK(type == "BPE", "tokenizer.json: model type '", type, "' is not supported (only BPE)");
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    LFM_CHECK(it == m.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()),
              "tokenizer.json: BPE option '", key, "' = ", json_excerpt(*it), " is not supported");
  }
  LFM_CHECK(!flag(m, "byte_fallback", false), "tokenizer.json: BPE byte_fallback = true is not supported");
  spec.ignore_merges = flag(m, "ignore_merges", false);

  const json& vocab = m.at("vocab");
  LFM_CHECK(vocab.is_object(), "tokenizer.json: model.vocab must be an object of token → id");
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    max_id = std::max(max_id, token_id(it.value(), "tokenizer.json: vocab entry '" + it.key() + "'"));
  spec.vocab.assign(static_cast<size_t>(max_id + 1), std::string());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    LFM_CHECK(spec.vocab[id].empty(), "tokenizer.json: id ", id, " is used by both '", spec.vocab[id], "' and '", it.key(), "'");
    spec.vocab[id] = it.key();
    ids.emplace(it.key(), id);
  }

  const json& merges = m.at("merges");
  LFM_CHECK(merges.is_array(), "tokenizer.json: model.merges must be an array");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    if (e.is_string()) {  // "a b" (older files)
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      LFM_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
                "tokenizer.json: merge ", i, " '", s, "' is not two space-separated tokens");
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
      spec.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      fail("tokenizer.json: merge ", i, " must be \"a b\" or [\"a\", \"b\"], got ", json_excerpt(e));
    }
    const auto& [a, b] = spec.merges.back();
    for (const std::string& tok : {a, b, a + b}) {
      LFM_CHECK(ids.count(tok), "tokenizer.json: merge ", i, " ('", a, "' '", b, "') uses token '", tok,
                "' which is not in the vocabulary");
    }
  }
}

AddedToken read_added_token(const json& t, const char* source) {
  AddedToken a;
  a.content = t.at("content").get<std::string>();
  a.id = token_id(t.at("id"), cat(source, ": added token '", a.content.substr(0, 80), "'"));
  a.special = flag(t, "special", false);
  a.lstrip = flag(t, "lstrip", false);
  a.rstrip = flag(t, "rstrip", false);
  a.normalized = flag(t, "normalized", !a.special);
  a.single_word = flag(t, "single_word", false);
  return a;
}

// Ensures spec.vocab covers an added token's id; the vocab slot holds its content when empty.
void place_added_token(TokenizerSpec& spec, const AddedToken& a) {
  if (static_cast<size_t>(a.id) >= spec.vocab.size()) spec.vocab.resize(static_cast<size_t>(a.id) + 1);
  if (spec.vocab[a.id].empty()) spec.vocab[a.id] = a.content;
}

}  // namespace

TokenizerSpec parse_tokenizer_json(const json& j) {
  LFM_CHECK(j.is_object(), "tokenizer.json: top level must be a JSON object");
  auto model = j.find("model");
  LFM_CHECK(model != j.end() && !model->is_null(), "tokenizer.json: missing 'model'");
  TokenizerSpec spec;
  try {
    std::unordered_map<std::string, int32_t> ids;
    read_model(*model, spec, ids);
    read_normalizer(j.value("normalizer", json()));
    read_pre_tokenizer(j.value("pre_tokenizer", json()), spec);
    read_decoder(j.value("decoder", json()));
    if (auto added = j.find("added_tokens"); added != j.end() && !added->is_null()) {
      for (const json& t : *added) {
        spec.added_tokens.push_back(read_added_token(t, "tokenizer.json"));
        place_added_token(spec, spec.added_tokens.back());
        ids.emplace(spec.added_tokens.back().content, spec.added_tokens.back().id);
      }
    }
    read_post_processor(j.value("post_processor", json()), spec, ids);
  } catch (const json::exception& e) {
    // Wrong JSON types or missing keys inside a component.
    fail("tokenizer.json: malformed content: ", e.what());
  }
  return spec;
}

TokenizerSpec parse_tokenizer_json_text(const std::string& text) {
  check_json_depth(text, "tokenizer.json");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // also out_of_range: a number like 1e999 (found by fuzz_tokenizer)
    fail("tokenizer.json: invalid JSON: ", e.what());
  }
  return parse_tokenizer_json(j);
}

std::string chat_template_from_config(const json& config) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  LFM_CHECK(it->is_array() && !it->empty(), "tokenizer_config.json: chat_template must be a string or a list of {name, template}");
  for (const json& e : *it) {
    if (e.value("name", "") == "default") return e.at("template").get<std::string>();
  }
  return (*it)[0].at("template").get<std::string>();
}

void apply_tokenizer_config(TokenizerSpec& spec, const json& config) {
  LFM_CHECK(config.is_object(), "tokenizer_config.json: top level must be a JSON object");
  try {
    // added_tokens_decoder can re-declare tokens (transformers re-adds them, updating flags).
    if (auto dec = config.find("added_tokens_decoder"); dec != config.end() && dec->is_object()) {
      for (auto it = dec->begin(); it != dec->end(); ++it) {
        json t = it.value();
        LFM_CHECK(t.is_object(), "tokenizer_config.json: added_tokens_decoder entry '", it.key(), "' is not an object");
        // Keys are decimal ids; parsed strictly (std::stoi would accept "12abc" and report "stoi").
        const std::string& key = it.key();
        LFM_CHECK(!key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos,
                  "tokenizer_config.json: added_tokens_decoder key '", key.substr(0, 40),
                  "' is not a token id (a decimal integer below ", limits::kMaxVocabSize, ")");
        t["id"] = std::stoll(key);
        const AddedToken a = read_added_token(t, "tokenizer_config.json");
        auto same = std::find_if(spec.added_tokens.begin(), spec.added_tokens.end(), [&](const AddedToken& x) { return x.id == a.id; });
        if (same == spec.added_tokens.end()) {
          spec.added_tokens.push_back(a);
          place_added_token(spec, a);
        } else {
          LFM_CHECK(same->content == a.content, "tokenizer_config.json: added token ", a.id, " is '", a.content,
                    "' but tokenizer.json has '", same->content, "'");
          *same = a;
        }
      }
    }
    // Token texts are strings or AddedToken-like objects {"content": …}.
    auto token_text = [&](const char* key, std::string& text, int32_t& id) {
      auto it = config.find(key);
      if (it == config.end() || it->is_null()) return;
      text = it->is_string() ? it->get<std::string>() : it->at("content").get<std::string>();
      id = -1;
      for (const AddedToken& a : spec.added_tokens) {
        if (a.content == text) id = a.id;
      }
      if (id < 0) {
        auto v = std::find(spec.vocab.begin(), spec.vocab.end(), text);
        LFM_CHECK(v != spec.vocab.end(), "tokenizer_config.json: ", key, " '", text, "' is not in the vocabulary");
        id = static_cast<int32_t>(v - spec.vocab.begin());
      }
    };
    token_text("bos_token", spec.bos_token, spec.bos_id);
    token_text("eos_token", spec.eos_token, spec.eos_id);
    token_text("pad_token", spec.pad_token, spec.pad_id);
    spec.add_bos = flag(config, "add_bos_token", spec.add_bos);
    spec.add_eos = flag(config, "add_eos_token", spec.add_eos);
    LFM_CHECK(!spec.add_bos || spec.bos_id >= 0, "tokenizer_config.json: add_bos_token is true but there is no bos_token");
    LFM_CHECK(!spec.add_eos || spec.eos_id >= 0, "tokenizer_config.json: add_eos_token is true but there is no eos_token");
    const std::string tmpl = chat_template_from_config(config);
    if (!tmpl.empty()) spec.chat_template = tmpl;
  } catch (const json::exception& e) {
    fail("tokenizer_config.json: malformed content: ", e.what());
  }
}

}  // namespace lfm
