#include "hub/model_ref.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace lfm::hub {
namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// huggingface_hub's validate_repo_id for one part: [\w.-]{1,96} starting and ending with a word
// character, without "--" or "..".
bool valid_part(const std::string& p) {
  if (p.empty() || p.size() > 96 || !word_char(p.front()) || !word_char(p.back())) return false;
  if (p.find("--") != std::string::npos || p.find("..") != std::string::npos) return false;
  return std::all_of(p.begin(), p.end(), [](char c) { return word_char(c) || c == '-' || c == '.'; });
}

bool ends_with_gguf(const std::string& s) {
  if (s.size() < 5) return false;
  std::string tail = s.substr(s.size() - 5);
  std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return tail == ".gguf";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t i = 0;
  for (size_t j; (j = s.find(sep, i)) != std::string::npos; i = j + 1) out.push_back(s.substr(i, j - i));
  out.push_back(s.substr(i));
  return out;
}

std::optional<ModelRef> reject(std::string* why, const std::string& reason) {
  if (why) *why = reason;
  return std::nullopt;
}

}  // namespace

std::string ModelRef::str() const {
  std::string s = repo;
  if (!file.empty()) s += "/" + file;
  if (!quant.empty()) s += ":" + quant;
  if (revision_given) s += "@" + revision;
  return s;
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::optional<ModelRef> parse_model_ref(const std::string& s, std::string* why) {
  if (s.empty()) return reject(why, "empty reference");
  if (s[0] == '/' || s[0] == '.' || s[0] == '~') return reject(why, "'" + s + "' is a path");
  const size_t body_end = s.find_first_of(":@");
  const std::string body = s.substr(0, body_end);
  ModelRef ref;
  // Modifiers: ":QUANT" and "@REV", each at most once, in either order.
  bool have_quant = false;
  for (size_t i = body_end; i != std::string::npos && i < s.size();) {
    const size_t next = s.find_first_of(s[i] == ':' ? "@" : ":", i + 1);
    const std::string value = s.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
    if (s[i] == ':') {
      if (have_quant || value.empty() ||
          !std::all_of(value.begin(), value.end(), [](char c) { return word_char(c) || c == '-' || c == '.'; }))
        return reject(why, "'" + s + "': expected ':QUANT' (letters, digits, '_', '-', '.') once");
      ref.quant = value;
      have_quant = true;
    } else {
      if (ref.revision_given || value.empty() || value.find("..") != std::string::npos || value.front() == '/' ||
          value.back() == '/' || value.find_first_of(" \t\n\\") != std::string::npos)
        return reject(why, "'" + s + "': expected '@REVISION' (a branch, tag or commit) once");
      ref.revision = value;
      ref.revision_given = true;
    }
    i = next;
  }
  const std::vector<std::string> parts = split(body, '/');
  if (parts.size() < 2) return reject(why, "'" + s + "' is not OWNER/NAME");
  if (!valid_part(parts[0]) || !valid_part(parts[1]))
    return reject(why, "'" + s + "': '" + parts[0] + "/" + parts[1] +
                           "' is not a Hub repository id (letters, digits, '-', '_', '.'; no '--' or '..')");
  ref.repo = parts[0] + "/" + parts[1];
  if (parts.size() > 2) {
    for (size_t i = 2; i < parts.size(); ++i) {
      if (parts[i].empty() || parts[i] == "." || parts[i] == "..") return reject(why, "'" + s + "': bad file path");
      ref.file += (i > 2 ? "/" : "") + parts[i];
    }
    if (!ends_with_gguf(ref.file)) return reject(why, "'" + s + "': a file inside a repository must be a .gguf");
    if (have_quant) return reject(why, "'" + s + "': name a .gguf file or a :QUANT, not both");
  }
  return ref;
}

}  // namespace lfm::hub
