// GGUF (v2 and v3) reader: header, typed metadata (arrays and nested arrays included), tensor
// infos and memory-mapped tensor data (never copied, except a tensor whose mapped address is not
// aligned to its element size, which only happens with general.alignment < 4).
//
// Everything is validated against the file size before any allocation or read: counts, string
// and array lengths, n_dims, dimensions, tensor types, offsets (aligned, inside the file, not
// overlapping) and data sizes. A hostile or truncated file is an lfm::Error naming what is wrong.
//
// Layout (little-endian):  "GGUF" u32 version  u64 n_tensors  u64 n_kv
//   n_kv × { string key, u32 value_type, value }       string = u64 length + bytes
//   n_tensors × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the data section; offsets are relative to it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "core/mapped_file.h"

namespace lfm::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);

// One metadata value. Integers keep their signedness (u for unsigned types, i for signed),
// floats are widened to double, arrays hold their elements (of type `elem`) in `arr`.
struct Value {
  ValueType type = ValueType::U8;
  ValueType elem = ValueType::U8;  // arrays only
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string str;
  std::vector<Value> arr;

  bool is_integer() const;
  bool is_number() const { return is_integer() || type == ValueType::F32 || type == ValueType::F64; }
  // Typed accessors; each throws lfm::Error naming `what` on a type mismatch or overflow.
  int64_t as_int(const std::string& what) const;
  double as_double(const std::string& what) const;
  bool as_bool(const std::string& what) const;
  const std::string& as_string(const std::string& what) const;
  const std::vector<Value>& as_array(const std::string& what) const;
  // Short human-readable rendering (arrays abbreviated after max_items elements).
  std::string to_string(size_t max_items = 8) const;

  // Constructors used by the writer and tests.
  static Value of_u32(uint32_t v);
  static Value of_i32(int32_t v);
  static Value of_u64(uint64_t v);
  static Value of_f32(float v);
  static Value of_bool(bool v);
  static Value of_string(std::string v);
  static Value of_array(ValueType elem, std::vector<Value> items);
};

// ggml tensor type ids (the values stored in GGUF files).
namespace ggml_type {
constexpr uint32_t F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10,
                   Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, I8 = 24, I16 = 25, I32 = 26, I64 = 27,
                   F64 = 28, BF16 = 30;
}
// Name of a ggml type id ("Q4_K"), or nullptr when the id is not a ggml type.
const char* ggml_type_name(uint32_t id);
// The DType of a ggml type id; nullopt for ggml types lfm cannot store or decode.
std::optional<DType> dtype_from_ggml(uint32_t id);
uint32_t ggml_from_dtype(DType t);

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;   // ggml order: ne[0] is the innermost (row) length
  uint32_t ggml_type = 0;
  DType dtype = DType::F32;
  uint64_t offset = 0;       // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;

  int64_t numel() const;
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // throws lfm::Error

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_.size(); }

  // Metadata in file order; lookups by key.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(const std::string& key) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  void drop_pages(const void* p, size_t n) const { file_.drop_pages(p, n); }
  void detach_from_file(std::vector<std::pair<const void*, size_t>> keep) const { file_.detach_from_file(std::move(keep)); }

 private:
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  std::vector<AlignedBuffer> copies_;  // only for tensors whose mapped address is misaligned
};

// Limits that keep hostile files from driving recursion or allocation.
constexpr int kMaxDims = 4;            // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 8;

// llama_ftype values (general.file_type) and their names ("Q4_K_M"); "unknown" otherwise.
const char* file_type_name(int64_t ftype);

}  // namespace lfm::gguf

namespace lfm {
// True for a path ending in .gguf, or a file of another name that starts with the GGUF magic.
bool is_gguf_path(const std::string& path);
}  // namespace lfm
