#include "formats/gguf_reader.h"

#include "core/file_io.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace lfm::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32

struct GgmlTypeEntry {
  uint32_t id;
  const char* name;
  bool has_dtype;
  DType dtype;
};
// Every ggml type id of current ggml; those lfm decodes map to a DType. (Ids 4, 5 and 31-33,
// 36-38 were removed from ggml and are unknown here, as in ggml.)
constexpr GgmlTypeEntry kGgmlTypes[] = {
    {0, "F32", true, DType::F32},      {1, "F16", true, DType::F16},      {2, "Q4_0", true, DType::Q4_0},
    {3, "Q4_1", true, DType::Q4_1},    {6, "Q5_0", true, DType::Q5_0},    {7, "Q5_1", true, DType::Q5_1},
    {8, "Q8_0", true, DType::Q8_0},    {9, "Q8_1", false, DType::F32},    {10, "Q2_K", false, DType::F32},
    {11, "Q3_K", true, DType::Q3_K},   {12, "Q4_K", true, DType::Q4_K},   {13, "Q5_K", true, DType::Q5_K},
    {14, "Q6_K", true, DType::Q6_K},   {15, "Q8_K", true, DType::Q8_K},   {16, "IQ2_XXS", false, DType::F32},
    {17, "IQ2_XS", false, DType::F32}, {18, "IQ3_XXS", false, DType::F32}, {19, "IQ1_S", false, DType::F32},
    {20, "IQ4_NL", false, DType::F32}, {21, "IQ3_S", false, DType::F32},  {22, "IQ2_S", false, DType::F32},
    {23, "IQ4_XS", false, DType::F32}, {24, "I8", false, DType::F32},     {25, "I16", false, DType::F32},
    {26, "I32", true, DType::I32},     {27, "I64", false, DType::F32},    {28, "F64", false, DType::F32},
    {29, "IQ1_M", false, DType::F32},  {30, "BF16", true, DType::BF16},   {34, "TQ1_0", false, DType::F32},
    {35, "TQ2_0", false, DType::F32},  {39, "MXFP4", false, DType::F32},
};

const GgmlTypeEntry* ggml_entry(uint32_t id) {
  for (const auto& e : kGgmlTypes)
    if (e.id == id) return &e;
  return nullptr;
}

// Bounds-checked little-endian cursor over the mapped file.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : d_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, d_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    LFM_CHECK(len <= remaining(), "gguf: '", path_, "': ", what, " declares a string of ", len,
              " bytes at offset ", pos_ - 8, " but only ", remaining(), " bytes remain (truncated or corrupt)");
    std::string s(reinterpret_cast<const char*>(d_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  void need(size_t n, const char* what) const {
    LFM_CHECK(n <= remaining(), "gguf: '", path_, "': file ends inside ", what, " at offset ", pos_, " (needs ", n,
              " bytes, ", remaining(), " remain; truncated?)");
  }

  const std::string& path() const { return path_; }

 private:
  const uint8_t* d_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

// Fixed byte size of a scalar value type; 0 for STRING/ARRAY.
size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    default: return 0;
  }
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

// The fewest bytes one value of type t can occupy (used to reject absurd array lengths
// before allocating): strings need their 8-byte length, arrays their 12-byte header.
size_t min_value_size(ValueType t) {
  if (t == ValueType::STRING) return 8;
  if (t == ValueType::ARRAY) return 12;
  return scalar_size(t);
}

// Each decoded element costs a Value (~100 bytes) however small it is in the file, so the total
// number of array elements is capped: real files hold a few hundred thousand (tokens, merges,
// token types); the cap keeps a hostile file from turning 1 byte into 100.
constexpr uint64_t kMaxMetadataElements = uint64_t{1} << 23;
constexpr uint64_t kMaxMetadataEntries = uint64_t{1} << 16;
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;

Value read_value(Cursor& c, ValueType t, const std::string& key, int depth, uint64_t& budget) {
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::U8: v.u = c.read<uint8_t>("a u8 value"); break;
    case ValueType::I8: v.i = c.read<int8_t>("an i8 value"); break;
    case ValueType::U16: v.u = c.read<uint16_t>("a u16 value"); break;
    case ValueType::I16: v.i = c.read<int16_t>("an i16 value"); break;
    case ValueType::U32: v.u = c.read<uint32_t>("a u32 value"); break;
    case ValueType::I32: v.i = c.read<int32_t>("an i32 value"); break;
    case ValueType::U64: v.u = c.read<uint64_t>("a u64 value"); break;
    case ValueType::I64: v.i = c.read<int64_t>("an i64 value"); break;
    case ValueType::F32: v.f = c.read<float>("an f32 value"); break;
    case ValueType::F64: v.f = c.read<double>("an f64 value"); break;
    case ValueType::BOOL: {
      const uint8_t b = c.read<uint8_t>("a bool value");
      LFM_CHECK(b <= 1, "gguf: '", c.path(), "': metadata '", key, "' has a bool byte ", int(b), " (must be 0 or 1)");
      v.b = b != 0;
      break;
    }
    case ValueType::STRING: v.str = c.read_string("a string value"); break;
    case ValueType::ARRAY: {
      LFM_CHECK(depth < kMaxArrayNesting, "gguf: '", c.path(), "': metadata '", key, "' nests arrays deeper than ",
                kMaxArrayNesting, " levels");
      const uint32_t et = c.read<uint32_t>("an array element type");
      LFM_CHECK(valid_value_type(et), "gguf: '", c.path(), "': metadata '", key, "' has unknown array element type ",
                et);
      v.elem = static_cast<ValueType>(et);
      const uint64_t n = c.read<uint64_t>("an array length");
      const size_t min = std::max<size_t>(1, min_value_size(v.elem));
      LFM_CHECK(n <= c.remaining() / min, "gguf: '", c.path(), "': metadata '", key, "' declares an array of ", n,
                " ", value_type_name(v.elem), " elements but only ", c.remaining(),
                " bytes remain (absurd array length or truncated file)");
      LFM_CHECK(n <= budget, "gguf: '", c.path(), "': metadata '", key, "' declares an array of ", n,
                " elements, beyond lfm's limit of ", kMaxMetadataElements, " metadata array elements per file");
      budget -= n;
      v.arr.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) v.arr.push_back(read_value(c, v.elem, key, depth + 1, budget));
      break;
    }
  }
  return v;
}

bool is_power_of_two(uint64_t x) { return x && !(x & (x - 1)); }

}  // namespace

const char* value_type_name(ValueType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  const auto k = static_cast<uint32_t>(t);
  return k < std::size(names) ? names[k] : "?";
}

const char* ggml_type_name(uint32_t id) {
  const GgmlTypeEntry* e = ggml_entry(id);
  return e ? e->name : nullptr;
}

std::optional<DType> dtype_from_ggml(uint32_t id) {
  const GgmlTypeEntry* e = ggml_entry(id);
  if (!e || !e->has_dtype) return std::nullopt;
  return e->dtype;
}

uint32_t ggml_from_dtype(DType t) {
  for (const auto& e : kGgmlTypes)
    if (e.has_dtype && e.dtype == t) return e.id;
  fail("gguf: no ggml type for ", dtype_name(t));
}

// ---- Value ----

bool Value::is_integer() const {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16: case ValueType::U32:
    case ValueType::I32: case ValueType::U64: case ValueType::I64: return true;
    default: return false;
  }
}

int64_t Value::as_int(const std::string& what) const {
  LFM_CHECK(is_integer(), "gguf: '", what, "' must be an integer, got ", value_type_name(type));
  const bool is_unsigned = type == ValueType::U8 || type == ValueType::U16 || type == ValueType::U32 || type == ValueType::U64;
  if (is_unsigned) {
    LFM_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "gguf: '", what, "' value ", u,
              " is out of range");
    return static_cast<int64_t>(u);
  }
  return i;
}

double Value::as_double(const std::string& what) const {
  if (type == ValueType::F32 || type == ValueType::F64) return f;
  return static_cast<double>(as_int(what));
}

bool Value::as_bool(const std::string& what) const {
  LFM_CHECK(type == ValueType::BOOL, "gguf: '", what, "' must be a bool, got ", value_type_name(type));
  return b;
}

const std::string& Value::as_string(const std::string& what) const {
  LFM_CHECK(type == ValueType::STRING, "gguf: '", what, "' must be a string, got ", value_type_name(type));
  return str;
}

const std::vector<Value>& Value::as_array(const std::string& what) const {
  LFM_CHECK(type == ValueType::ARRAY, "gguf: '", what, "' must be an array, got ", value_type_name(type));
  return arr;
}

std::string Value::to_string(size_t max_items) const {
  std::ostringstream os;
  switch (type) {
    case ValueType::BOOL: os << (b ? "true" : "false"); break;
    case ValueType::F32: case ValueType::F64: os << f; break;
    case ValueType::STRING: {
      std::string s = str.size() > 120 ? str.substr(0, 117) + "..." : str;
      for (char& ch : s)
        if (ch == '\n' || ch == '\r') ch = ' ';
      os << '"' << s << '"';
      break;
    }
    case ValueType::ARRAY: {
      os << value_type_name(elem) << "[" << arr.size() << "] [";
      for (size_t k = 0; k < arr.size() && k < max_items; ++k) os << (k ? ", " : "") << arr[k].to_string(max_items);
      if (arr.size() > max_items) os << ", ...";
      os << "]";
      break;
    }
    default:
      if (type == ValueType::I8 || type == ValueType::I16 || type == ValueType::I32 || type == ValueType::I64) os << i;
      else os << u;
  }
  return os.str();
}

Value Value::of_u32(uint32_t v) { Value x; x.type = ValueType::U32; x.u = v; return x; }
Value Value::of_i32(int32_t v) { Value x; x.type = ValueType::I32; x.i = v; return x; }
Value Value::of_u64(uint64_t v) { Value x; x.type = ValueType::U64; x.u = v; return x; }
Value Value::of_f32(float v) { Value x; x.type = ValueType::F32; x.f = v; return x; }
Value Value::of_bool(bool v) { Value x; x.type = ValueType::BOOL; x.b = v; return x; }
Value Value::of_string(std::string v) { Value x; x.type = ValueType::STRING; x.str = std::move(v); return x; }
Value Value::of_array(ValueType elem, std::vector<Value> items) {
  Value x;
  x.type = ValueType::ARRAY;
  x.elem = elem;
  x.arr = std::move(items);
  return x;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// ---- GgufFile ----

GgufFile::GgufFile(const std::string& path) : file_(path) {
  const std::string& p = file_.path();
  Cursor c(file_.data(), file_.size(), p);
  LFM_CHECK(file_.size() >= 4, "gguf: '", p, "' is ", file_.size(), " bytes, too short for a GGUF header");
  const uint32_t magic = c.read<uint32_t>("the magic");
  LFM_CHECK(magic == kMagic, "gguf: '", p, "' has bad magic (expected \"GGUF\"); not a GGUF file");
  version_ = c.read<uint32_t>("the version");
  LFM_CHECK(version_ != 1, "gguf: '", p, "' is GGUF version 1, which is not supported (versions 2 and 3 are)");
  LFM_CHECK(version_ == 2 || version_ == 3, "gguf: '", p, "' has unsupported GGUF version ", version_,
            (version_ > 0xffff ? " (a big-endian file?)" : ""), " (versions 2 and 3 are supported)");
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at
  // least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
  LFM_CHECK(n_kv <= c.remaining() / 13, "gguf: '", p, "' declares ", n_kv, " metadata entries but the file has only ",
            c.remaining(), " bytes left (absurd metadata count or truncated file)");
  // Hard caps far above any real model (which has ~50 entries and at most tens of thousands of
  // tensors) bound the memory a hostile header can make us reserve.
  LFM_CHECK(n_kv <= kMaxMetadataEntries, "gguf: '", p, "' declares ", n_kv, " metadata entries (absurd metadata count; limit ",
            kMaxMetadataEntries, ")");
  LFM_CHECK(n_tensors <= kMaxTensors, "gguf: '", p, "' declares ", n_tensors, " tensors (absurd tensor count; limit ",
            kMaxTensors, ")");
  LFM_CHECK(n_tensors <= c.remaining() / 24, "gguf: '", p, "' declares ", n_tensors,
            " tensors but the file has only ", c.remaining(),
            " bytes left (absurd tensor count or truncated file)");

  kv_.reserve(static_cast<size_t>(n_kv));
  uint64_t element_budget = kMaxMetadataElements;
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.read_string("a metadata key");
    const uint32_t t = c.read<uint32_t>("a metadata value type");
    LFM_CHECK(valid_value_type(t), "gguf: '", p, "': metadata '", key, "' has unknown value type ", t);
    Value v = read_value(c, static_cast<ValueType>(t), key, 0, element_budget);
    LFM_CHECK(!kv_index_.count(key), "gguf: '", p, "': duplicate metadata key '", key, "'");
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }
  if (const Value* a = find("general.alignment")) {
    LFM_CHECK(a->type == ValueType::U32, "gguf: '", p, "': general.alignment must be a u32, got ",
              value_type_name(a->type));
    LFM_CHECK(is_power_of_two(a->u), "gguf: '", p, "': general.alignment ", a->u, " is not a power of two");
    alignment_ = a->u;
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo t;
    t.name = c.read_string("a tensor name");
    const uint32_t n_dims = c.read<uint32_t>("a tensor's n_dims");
    LFM_CHECK(n_dims >= 1 && n_dims <= kMaxDims, "gguf: '", p, "': tensor '", t.name, "' has n_dims ", n_dims,
              " (must be 1..", kMaxDims, ")");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>("a tensor dimension");
      LFM_CHECK(ne >= 1 && ne <= (1ull << 48) / numel, "gguf: '", p, "': tensor '", t.name, "' has absurd dimension ",
                d, " = ", ne);
      numel *= ne;
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    t.ggml_type = c.read<uint32_t>("a tensor type");
    const char* tname = ggml_type_name(t.ggml_type);
    LFM_CHECK(tname, "gguf: '", p, "': tensor '", t.name, "' has unknown tensor type id ", t.ggml_type);
    const std::optional<DType> dt = dtype_from_ggml(t.ggml_type);
    LFM_CHECK(dt, "gguf: '", p, "': tensor '", t.name, "' has ggml type ", tname,
              " which lfm does not support (F32, F16, BF16, I32, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K)");
    t.dtype = *dt;
    const DTypeTraits& tr = dtype_traits(t.dtype);
    LFM_CHECK(t.ne[0] % tr.block_elems == 0, "gguf: '", p, "': tensor '", t.name, "' row length ", t.ne[0],
              " is not a multiple of the ", tname, " block size ", tr.block_elems);
    t.nbytes = numel / tr.block_elems * tr.block_bytes;
    t.offset = c.read<uint64_t>("a tensor data offset");
    LFM_CHECK(t.offset % alignment_ == 0, "gguf: '", p, "': tensor '", t.name, "' data offset ", t.offset,
              " is not a multiple of the alignment ", alignment_, " (misaligned offset)");
    LFM_CHECK(!tensor_index_.count(t.name), "gguf: '", p, "': duplicate tensor name '", t.name, "'");
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = file_.size() >= data_offset_ ? file_.size() - data_offset_ : 0;
  LFM_CHECK(tensors_.empty() || file_.size() >= data_offset_, "gguf: '", p, "' ends before its data section (offset ",
            data_offset_, "; truncated?)");
  for (TensorInfo& t : tensors_) {
    LFM_CHECK(t.offset <= data_size && t.nbytes <= data_size - t.offset, "gguf: '", p, "': tensor '", t.name,
              "' data [", t.offset, ", ", t.offset + t.nbytes, ") exceeds the data section of ", data_size,
              " bytes (truncated file?)");
    const uint8_t* ptr = file_.data() + data_offset_ + t.offset;
    const size_t elem_align = t.dtype == DType::F32 || t.dtype == DType::I32 ? 4 : 2;
    if (reinterpret_cast<uintptr_t>(ptr) % elem_align != 0) {
      copies_.emplace_back(t.nbytes);
      std::memcpy(copies_.back().data(), ptr, t.nbytes);
      ptr = static_cast<const uint8_t*>(copies_.back().data());
    }
    t.data = ptr;
  }
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k)
    LFM_CHECK(by_offset[k]->offset >= by_offset[k - 1]->offset + by_offset[k - 1]->nbytes, "gguf: '", p,
              "': tensors '", by_offset[k - 1]->name, "' and '", by_offset[k]->name, "' overlap (data [",
              by_offset[k - 1]->offset, ", ", by_offset[k - 1]->offset + by_offset[k - 1]->nbytes, ") and [",
              by_offset[k]->offset, ", ...))");
}

const Value* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const char* file_type_name(int64_t ftype) {
  switch (ftype) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K_S";
    case 12: return "Q3_K_M";
    case 13: return "Q3_K_L";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return "unknown";
  }
}

}  // namespace lfm::gguf

namespace lfm {

bool is_gguf_path(const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return true;
  // Also accept a GGUF file under another name, recognised by its magic (never opening a FIFO).
  if (!is_regular_path(path)) return false;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char magic[4] = {};
  const bool ok = std::fread(magic, 1, 4, f) == 4 && std::equal(magic, magic + 4, "GGUF");
  std::fclose(f);
  return ok;
}

}  // namespace lfm
