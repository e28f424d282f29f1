#include "core/ordered_json_parse.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "core/json_guard.h"

namespace lfm {

namespace {

using ojson = nlohmann::ordered_json;

// nlohmann's SAX interface, building the value bottom-up: a finished value is moved into the
// container that is open above it. Objects are appended to through the vector that ordered_map
// is, never through its emplace/operator[] (each a scan of the keys so far).
class Builder {
 public:
  Builder(std::string_view what, const OrderedJsonOptions& opt) : what_(what), opt_(opt) {}

  bool null() { return put(ojson(nullptr)); }
  bool boolean(bool b) { return put(ojson(b)); }
  bool number_integer(ojson::number_integer_t v) { return put(ojson(v)); }
  bool number_unsigned(ojson::number_unsigned_t v) { return put(ojson(v)); }
  bool number_float(ojson::number_float_t v, const ojson::string_t&) { return put(ojson(v)); }
  bool string(ojson::string_t& s) { return put(ojson(std::move(s))); }
  bool binary(ojson::binary_t&) { return put(ojson(nullptr)); }  // JSON text has none
  bool start_object(size_t) {
    open_.push_back({ojson::object(), {}, {}});
    return true;
  }
  bool key(ojson::string_t& k) {
    Open& o = open_.back();
    const size_t at = o.find(k);
    if (at != SIZE_MAX) {
      const std::string p = path(open_.size() - 1);
      if (opt_.unique_keys) throw JsonFieldError(p, cat(what_, ": key '", excerpt(k), "' appears twice in ", name(p)));
      o.overwrite = at;  // the last value wins, in the first one's place (as nlohmann)
    } else if (o.value.size() >= opt_.max_object_keys) {
      const std::string p = path(open_.size() - 1);
      throw JsonFieldError(p, cat(what_, ": ", name(p), " has more than ", opt_.max_object_keys, " keys (limit ",
                                  opt_.max_object_keys, ")"));
    } else {
      o.overwrite = SIZE_MAX;
      o.add(k);
    }
    o.key = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t) {
    open_.push_back({ojson::array(), {}, {}});
    return true;
  }
  bool end_array() { return close(); }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    fail(what_, " is not valid JSON: ", e.what());
  }

  ojson take() { return std::move(root_); }

 private:
  // Objects below this many keys are searched by a scan (cheaper than hashing); larger ones
  // get an index, so that finding a repeated key stays O(1) however many keys there are.
  static constexpr size_t kScanKeys = 16;

  struct Open {
    ojson value;
    std::string key;                                // objects: the key of the value being parsed
    std::unordered_map<std::string, size_t> index;  // objects of kScanKeys keys or more: key → position
    size_t overwrite = SIZE_MAX;                    // objects: position of a repeated key

    const ojson::object_t::Container& members() const {
      return value.get_ref<const ojson::object_t&>();
    }
    size_t find(const std::string& k) const {
      if (members().size() >= kScanKeys) {
        auto it = index.find(k);
        return it == index.end() ? SIZE_MAX : it->second;
      }
      for (size_t i = 0; i < members().size(); ++i)
        if (members()[i].first == k) return i;
      return SIZE_MAX;
    }
    // Notes new key `k` (appended next); builds the index when the object reaches kScanKeys.
    void add(const std::string& k) {
      const size_t n = members().size();
      if (n + 1 == kScanKeys)
        for (size_t i = 0; i < n; ++i) index.emplace(members()[i].first, i);
      if (n + 1 >= kScanKeys) index.emplace(k, n);
    }
  };

  bool put(ojson v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Open& o = open_.back();
    if (o.value.is_array()) {
      o.value.get_ref<ojson::array_t&>().push_back(std::move(v));
    } else if (o.overwrite != SIZE_MAX) {
      auto& members = static_cast<ojson::object_t::Container&>(o.value.get_ref<ojson::object_t&>());
      members[o.overwrite].second = std::move(v);
    } else {
      auto& members = static_cast<ojson::object_t::Container&>(o.value.get_ref<ojson::object_t&>());
      members.emplace_back(std::move(o.key), std::move(v));
    }
    return true;
  }

  bool close() {
    ojson v = std::move(open_.back().value);
    open_.pop_back();
    return put(std::move(v));
  }

  // The path of open container `level` (0: the root), as "prefix.key[3].key".
  std::string path(size_t level) const {
    std::string p = opt_.field_prefix;
    for (size_t i = 1; i <= level; ++i) {
      const Open& parent = open_[i - 1];
      if (parent.value.is_array()) {
        p += "[" + std::to_string(parent.value.size()) + "]";
      } else {
        if (!p.empty()) p += '.';
        p += excerpt(parent.key);
      }
    }
    return p;
  }

  static std::string name(const std::string& path) { return path.empty() ? "the top-level object" : "'" + path + "'"; }

  // Keys quoted in messages are the client's: at most 64 bytes of one (whole UTF-8 characters).
  static std::string excerpt(const std::string& k) {
    if (k.size() <= 64) return k;
    size_t cut = 64;
    while (cut > 0 && (static_cast<unsigned char>(k[cut]) & 0xC0) == 0x80) --cut;
    return k.substr(0, cut) + "…";
  }

  std::string_view what_;
  const OrderedJsonOptions& opt_;
  std::vector<Open> open_;
  ojson root_;
};

}  // namespace

nlohmann::ordered_json parse_ordered_json_linear(std::string_view text, std::string_view what,
                                                 const OrderedJsonOptions& opt) {
  check_json_depth(text, what);
  Builder b(what, opt);
  try {
    ojson::sax_parse(text.begin(), text.end(), &b);
  } catch (const nlohmann::json::exception& e) {
    fail(what, " is not valid JSON: ", e.what());
  }
  return b.take();
}

}  // namespace lfm
