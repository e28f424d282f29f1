// tokenizer.ggml.* metadata (as llama.cpp writes it for LFM2) → TokenizerSpec, with the same
// meanings the tokenizer.json reader gives:
//   tokenizer.ggml.model "gpt2"          byte-level BPE (anything else is rejected)
//   tokenizer.ggml.pre "lfm2"            LFM2's Split regex (LFM2_SPEC §5.1), ignore_merges = true
//                                        ("llama3"/"llama-bpe" name the same regex; llama.cpp applies
//                                        ignore_merges to them as well)
//   tokenizer.ggml.tokens / merges       vocabulary (byte-level form) / "a b" merges in rank order
//   tokenizer.ggml.token_type            3 control → added special token; 4 user-defined → added
//                                        non-special token (LFM2's <|tool_call_start|>); 5 unused
//                                        "[PAD<id>]" → no token at that id; others plain
//   tokenizer.ggml.{bos,eos,padding}_token_id, add_bos_token (default true for lfm2), add_eos_token
//   tokenizer.chat_template              the Jinja chat template
#include "tokenizer/gguf_tokenizer.h"

#include "core/error.h"
#include "formats/gguf_reader.h"

namespace lfm {

namespace {

constexpr const char* kLfm2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

int32_t token_id(const gguf::GgufFile& f, const char* key, int64_t n_tokens) {
  const gguf::Value* v = f.find(key);
  if (!v) return -1;
  const int64_t id = v->as_int(key);
  if (id < 0 || id == 0xffffffffLL) return -1;  // llama.cpp writes -1 / UINT32_MAX for "none"
  LFM_CHECK(id < n_tokens, "tokenizer: GGUF ", key, " = ", id, " is outside the vocabulary of ", n_tokens);
  return static_cast<int32_t>(id);
}

TokenizerSpec spec_from_file(const std::string& path) {
  const gguf::GgufFile f(path);
  const gguf::Value* model = f.find("tokenizer.ggml.model");
  LFM_CHECK(model, "tokenizer: '", path, "' has no tokenizer (no tokenizer.ggml.model)");
  const std::string kind = model->as_string("tokenizer.ggml.model");
  LFM_CHECK(kind != "none", "tokenizer: '", path, "' has no tokenizer (tokenizer.ggml.model is 'none')");
  LFM_CHECK(kind == "gpt2", "tokenizer: '", path, "' has tokenizer model '", kind,
            "'; only byte-level BPE ('gpt2') is supported");

  TokenizerSpec spec;
  std::string pre = "lfm2";
  if (const gguf::Value* p = f.find("tokenizer.ggml.pre")) pre = p->as_string("tokenizer.ggml.pre");
  LFM_CHECK(pre == "lfm2" || pre == "llama3" || pre == "llama-bpe", "tokenizer: '", path,
            "' has pre-tokenizer '", pre, "'; supported: lfm2 (and llama3 / llama-bpe, the same regex)");
  spec.pretokenizer_regex = kLfm2Regex;
  spec.ignore_merges = true;

  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  LFM_CHECK(tokens, "tokenizer: '", path, "' lacks tokenizer.ggml.tokens");
  const auto& tok = tokens->as_array("tokenizer.ggml.tokens");
  LFM_CHECK(!tok.empty(), "tokenizer: '", path, "' has an empty tokenizer.ggml.tokens");
  spec.vocab.reserve(tok.size());
  for (const gguf::Value& t : tok) spec.vocab.push_back(t.as_string("tokenizer.ggml.tokens[]"));
  const auto n = static_cast<int64_t>(spec.vocab.size());

  if (const gguf::Value* types = f.find("tokenizer.ggml.token_type")) {
    const auto& ty = types->as_array("tokenizer.ggml.token_type");
    LFM_CHECK(static_cast<int64_t>(ty.size()) == n, "tokenizer: token_type has ", ty.size(), " entries for ", n,
              " tokens");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = ty[i].as_int("tokenizer.ggml.token_type[]");
      // An unused "[PAD<id>]" entry fills a hole in the id space (llama.cpp's converter pads
      // that way); the id has no token, as in the tokenizer.json it came from.
      if (t == 5 && spec.vocab[i] == "[PAD" + std::to_string(i) + "]") spec.vocab[i].clear();
      if (t != 3 && t != 4) continue;  // 3 control, 4 user-defined
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = spec.vocab[i];
      a.special = t == 3;
      spec.added_tokens.push_back(std::move(a));
    }
  }
  if (const gguf::Value* merges = f.find("tokenizer.ggml.merges")) {
    const auto& ms = merges->as_array("tokenizer.ggml.merges");
    spec.merges.reserve(ms.size());
    for (const gguf::Value& m : ms) {
      const std::string& s = m.as_string("tokenizer.ggml.merges[]");
      const size_t sp = s.find(' ');
      LFM_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
                "tokenizer: GGUF merge '", s, "' is not two tokens separated by one space");
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    }
  }
  spec.bos_id = token_id(f, "tokenizer.ggml.bos_token_id", n);
  spec.eos_id = token_id(f, "tokenizer.ggml.eos_token_id", n);
  spec.pad_id = token_id(f, "tokenizer.ggml.padding_token_id", n);
  if (spec.bos_id >= 0) spec.bos_token = spec.vocab[spec.bos_id];
  if (spec.eos_id >= 0) spec.eos_token = spec.vocab[spec.eos_id];
  if (spec.pad_id >= 0) spec.pad_token = spec.vocab[spec.pad_id];
  spec.add_bos = true;  // llama.cpp's default for the lfm2 pre-tokenizer
  if (const gguf::Value* v = f.find("tokenizer.ggml.add_bos_token")) spec.add_bos = v->as_bool("add_bos_token");
  if (const gguf::Value* v = f.find("tokenizer.ggml.add_eos_token")) spec.add_eos = v->as_bool("add_eos_token");
  LFM_CHECK(!spec.add_bos || spec.bos_id >= 0, "tokenizer: '", path, "' asks to add a BOS token but has no bos_token_id");
  LFM_CHECK(!spec.add_eos || spec.eos_id >= 0, "tokenizer: '", path, "' asks to add an EOS token but has no eos_token_id");
  if (const gguf::Value* v = f.find("tokenizer.chat_template")) spec.chat_template = v->as_string("tokenizer.chat_template");
  return spec;
}

}  // namespace

TokenizerSpec tokenizer_spec_from_gguf(const std::string& path) {
  try {
    return spec_from_file(path);
  } catch (const Error& e) {
    // Value accessors name only the key; say which file it came from.
    const std::string msg = e.what();
    if (msg.find(path) != std::string::npos) throw;
    fail(msg, " (in '", path, "')");
  }
}

}  // namespace lfm
