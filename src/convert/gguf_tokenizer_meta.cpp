#include "convert/gguf_tokenizer_meta.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm::gguf {

KeyValues tokenizer_metadata_from_gguf(const GgufFile& f) {
  KeyValues kv;
  for (const auto& [k, v] : f.metadata())
    if (k.rfind("tokenizer.", 0) == 0) kv.emplace_back(k, v);
  return kv;
}

KeyValues tokenizer_metadata_from_folder(const std::string& dir, int64_t vocab_size) {
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) return {};
  const TokenizerSpec spec = load_tokenizer_spec(dir);
  int64_t n = static_cast<int64_t>(spec.vocab.size());
  for (const AddedToken& t : spec.added_tokens) n = std::max<int64_t>(n, t.id + 1);
  LFM_CHECK(n <= vocab_size, "convert: the tokenizer in '", dir, "' has ", n, " tokens but the model's vocab_size is ",
            vocab_size, " (llama.cpp needs one token per embedding row)");
  return tokenizer_metadata_from_spec(spec, vocab_size);
}

KeyValues tokenizer_metadata_from_spec(const TokenizerSpec& spec, int64_t vocab_size) {
  int64_t n = std::max<int64_t>(vocab_size, static_cast<int64_t>(spec.vocab.size()));
  for (const AddedToken& t : spec.added_tokens) n = std::max<int64_t>(n, t.id + 1);
  std::vector<std::string> text(static_cast<size_t>(n));
  std::vector<int32_t> type(static_cast<size_t>(n), kNormal);
  for (size_t i = 0; i < spec.vocab.size(); ++i) text[i] = spec.vocab[i];
  for (const AddedToken& t : spec.added_tokens) {
    LFM_CHECK(t.id >= 0, "gguf tokenizer: added token '", t.content, "' has no id");
    text[t.id] = t.content;
    type[t.id] = t.special ? kControl : kUserDefined;
  }
  std::vector<Value> tokens, types, merges;
  tokens.reserve(text.size());
  for (int64_t i = 0; i < n; ++i) {
    if (text[i].empty()) {  // a hole in the id space: llama.cpp's converter pads the same way
      text[i] = "[PAD" + std::to_string(i) + "]";
      type[i] = kUnused;
    }
    tokens.push_back(Value::of_string(std::move(text[i])));
    types.push_back(Value::of_i32(type[i]));
  }
  merges.reserve(spec.merges.size());
  for (const auto& [a, b] : spec.merges) merges.push_back(Value::of_string(a + " " + b));

  KeyValues kv;
  kv.emplace_back("tokenizer.ggml.model", Value::of_string("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", Value::of_string("lfm2"));
  kv.emplace_back("tokenizer.ggml.tokens", Value::of_array(ValueType::STRING, std::move(tokens)));
  kv.emplace_back("tokenizer.ggml.token_type", Value::of_array(ValueType::I32, std::move(types)));
  kv.emplace_back("tokenizer.ggml.merges", Value::of_array(ValueType::STRING, std::move(merges)));
  if (spec.bos_id >= 0) kv.emplace_back("tokenizer.ggml.bos_token_id", Value::of_u32(static_cast<uint32_t>(spec.bos_id)));
  if (spec.eos_id >= 0) kv.emplace_back("tokenizer.ggml.eos_token_id", Value::of_u32(static_cast<uint32_t>(spec.eos_id)));
  if (spec.pad_id >= 0)
    kv.emplace_back("tokenizer.ggml.padding_token_id", Value::of_u32(static_cast<uint32_t>(spec.pad_id)));
  kv.emplace_back("tokenizer.ggml.add_bos_token", Value::of_bool(spec.add_bos));
  kv.emplace_back("tokenizer.ggml.add_eos_token", Value::of_bool(spec.add_eos));
  if (!spec.chat_template.empty()) kv.emplace_back("tokenizer.chat_template", Value::of_string(spec.chat_template));
  return kv;
}

}  // namespace lfm::gguf
