#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "core/limits.h"
#include "tokenizer/added_token_matcher.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex_splitter.h"
#include "core/utf8.h"

namespace lfm {

struct Tokenizer::Impl {
  tok::TokenIdMap token_ids;                 // vocab text → id (vocab entries and added tokens)
  std::vector<int8_t> kind;                  // per id: 0 regular, 1 added, 2 added + special
  std::vector<const std::string*> text_of;   // per id: the text decode uses (added content first)
  std::unique_ptr<tok::RegexSplitter> splitter;
  std::unique_ptr<tok::BpeModel> bpe;
  // HF matches non-normalized added tokens on the raw text first, then normalized ones inside
  // the remaining text; with no normalizer the two passes differ only in precedence.
  std::unique_ptr<tok::AddedTokenMatcher> raw_added, normalized_added;
};

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)), impl_(std::make_unique<Impl>()) {
  LFM_CHECK(!spec_.vocab.empty(), "tokenizer: empty vocabulary");
  LFM_CHECK(!spec_.pretokenizer_regex.empty(), "tokenizer: no pre-tokenizer regex");
  Impl& im = *impl_;
  const size_t n = spec_.vocab.size();
  LFM_CHECK(n <= static_cast<size_t>(limits::kMaxVocabSize), "tokenizer: vocabulary of ", n,
            " entries exceeds lfm's limit of ", limits::kMaxVocabSize);
  im.kind.assign(n, 0);
  im.text_of.assign(n, nullptr);
  im.token_ids.reserve(n + spec_.added_tokens.size());
  for (size_t id = 0; id < n; ++id) {
    if (spec_.vocab[id].empty()) continue;  // a hole in the id space
    im.token_ids.emplace(spec_.vocab[id], static_cast<int32_t>(id));
    im.text_of[id] = &spec_.vocab[id];
  }
  std::vector<AddedToken> raw, normalized;
  for (const AddedToken& a : spec_.added_tokens) {
    LFM_CHECK(a.id >= 0 && static_cast<size_t>(a.id) < n, "tokenizer: added token '", a.content.substr(0, 80),
              "' has id ", a.id, " outside the vocabulary of ", n);
    LFM_CHECK(!a.content.empty(), "tokenizer: added token ", a.id, " has empty content");
    LFM_CHECK(a.content.size() <= limits::kMaxAddedTokenBytes, "tokenizer: added token ", a.id, " is ",
              a.content.size(), " bytes long, beyond lfm's limit of ", limits::kMaxAddedTokenBytes);
    LFM_CHECK(find_invalid_utf8(a.content) == std::string::npos, "tokenizer: added token ", a.id, " is not valid UTF-8");
    im.kind[a.id] = a.special ? 2 : 1;
    im.text_of[a.id] = &a.content;
    im.token_ids.insert_or_assign(a.content, a.id);
    (a.normalized ? normalized : raw).push_back(a);
  }
  im.raw_added = std::make_unique<tok::AddedTokenMatcher>(raw);
  im.normalized_added = std::make_unique<tok::AddedTokenMatcher>(normalized);
  im.splitter = std::make_unique<tok::RegexSplitter>(spec_.pretokenizer_regex);
  im.bpe = std::make_unique<tok::BpeModel>(im.token_ids, spec_.merges, spec_.ignore_merges);
  for (int32_t special_id : {spec_.bos_id, spec_.eos_id, spec_.pad_id}) {
    LFM_CHECK(special_id < 0 || static_cast<size_t>(special_id) < n, "tokenizer: special token id ", special_id,
              " outside the vocabulary of ", n);
  }
  LFM_CHECK(!spec_.add_bos || spec_.bos_id >= 0, "tokenizer: add_bos is set but there is no BOS token");
  LFM_CHECK(!spec_.add_eos || spec_.eos_id >= 0, "tokenizer: add_eos is set but there is no EOS token");
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::encode_plain_text(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> pieces;
  impl_->splitter->split(text, pieces);
  for (std::string_view piece : pieces) impl_->bpe->encode(piece, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const size_t bad = find_invalid_utf8(text);
  LFM_CHECK(bad == std::string_view::npos, "tokenizer: input is not valid UTF-8 (ill-formed byte 0x", std::hex,
            static_cast<int>(static_cast<unsigned char>(text[bad])), std::dec, " at byte offset ", bad, ")");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_special && spec_.add_bos) ids.push_back(spec_.bos_id);
  std::vector<tok::TextSegment> outer, inner;
  impl_->raw_added->split(text, outer);
  for (const tok::TextSegment& s : outer) {
    if (s.token_id >= 0) {
      ids.push_back(s.token_id);
      continue;
    }
    const std::string_view part = text.substr(s.begin, s.end - s.begin);
    inner.clear();
    impl_->normalized_added->split(part, inner);
    for (const tok::TextSegment& t : inner) {
      if (t.token_id >= 0) {
        ids.push_back(t.token_id);
      } else {
        encode_plain_text(part.substr(t.begin, t.end - t.begin), ids);
      }
    }
  }
  if (add_special && spec_.add_eos) ids.push_back(spec_.eos_id);
  return ids;
}

void Tokenizer::check_id(int32_t id) const {
  LFM_CHECK(id >= 0 && id < vocab_size() && impl_->text_of[id] != nullptr, "tokenizer: token id ", id,
            " is not in the vocabulary (size ", vocab_size(), ")");
}

void Tokenizer::append_token_bytes(int32_t id, std::string& out) const {
  check_id(id);
  const std::string& text = *impl_->text_of[id];
  // Mirrors HF's ByteLevel decoder: map each code point back to its byte; a token with any code
  // point outside the byte alphabet (added tokens like "<|im_end|>" usually are inside it, but
  // e.g. "python ✓" is not) contributes its own UTF-8 bytes instead.
  const size_t before = out.size();
  if (!tok::symbols_to_bytes(text, out)) {
    out.resize(before);
    out += text;
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    append_token_bytes(id, bytes);
  }
  return utf8_lossy(bytes);
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  const size_t bad = find_invalid_utf8(text);
  LFM_CHECK(bad == std::string_view::npos, "tokenizer: input is not valid UTF-8 (at byte offset ", bad, ")");
  std::vector<std::string_view> pieces;
  impl_->splitter->split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  check_id(id);
  return *impl_->text_of[id];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_ids.find(token);
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  check_id(id);
  return impl_->kind[id] == 2;
}

bool Tokenizer::is_added(int32_t id) const {
  check_id(id);
  return impl_->kind[id] != 0;
}

}  // namespace lfm
