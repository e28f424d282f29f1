#include "formats/gguf_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace lfm::gguf {

namespace {
constexpr uint32_t kVersion = 3;
}

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  LFM_CHECK(alignment && !(alignment & (alignment - 1)), "gguf writer: alignment ", alignment, " is not a power of two");
}

GgufWriter::~GgufWriter() = default;  // abandoned (an exception mid-write): out_ removes the temporary file

void GgufWriter::set(const std::string& key, Value v) {
  LFM_CHECK(!f_, "gguf writer: metadata is fixed once writing has begun");
  for (auto& [k, val] : kv_)
    if (k == key) {
      val = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

const Value* GgufWriter::get(const std::string& key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

void GgufWriter::add_tensor(std::string name, std::vector<int64_t> ne, DType type) {
  LFM_CHECK(!f_, "gguf writer: tensors are fixed once writing has begun");
  LFM_CHECK(!ne.empty() && ne.size() <= static_cast<size_t>(kMaxDims), "gguf writer: tensor '", name, "' has ",
            ne.size(), " dims");
  int64_t numel = 1;
  for (int64_t d : ne) {
    LFM_CHECK(d > 0, "gguf writer: tensor '", name, "' has a non-positive dimension");
    numel *= d;
  }
  const DTypeTraits& tr = dtype_traits(type);
  LFM_CHECK(ne[0] % tr.block_elems == 0, "gguf writer: tensor '", name, "' row length ", ne[0],
            " is not a multiple of the ", tr.name, " block size ", tr.block_elems);
  const uint64_t nbytes = static_cast<uint64_t>(numel / tr.block_elems) * tr.block_bytes;
  tensors_.push_back({std::move(name), std::move(ne), type, nbytes, data_bytes_});
  data_bytes_ += (nbytes + alignment_ - 1) / alignment_ * alignment_;
}

void GgufWriter::put(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, f_) != n)
    fail("gguf writer: write to '", out_->temp_path(), "' failed: ", std::strerror(errno), " (disk full?)");
  file_pos_ += n;
}

void GgufWriter::put_string(const std::string& s) {
  const uint64_t n = s.size();
  put(&n, 8);
  put(s.data(), s.size());
}

void GgufWriter::put_value(const Value& v) {
  switch (v.type) {
    case ValueType::U8: { const auto x = static_cast<uint8_t>(v.u); put(&x, 1); break; }
    case ValueType::I8: { const auto x = static_cast<int8_t>(v.i); put(&x, 1); break; }
    case ValueType::U16: { const auto x = static_cast<uint16_t>(v.u); put(&x, 2); break; }
    case ValueType::I16: { const auto x = static_cast<int16_t>(v.i); put(&x, 2); break; }
    case ValueType::U32: { const auto x = static_cast<uint32_t>(v.u); put(&x, 4); break; }
    case ValueType::I32: { const auto x = static_cast<int32_t>(v.i); put(&x, 4); break; }
    case ValueType::U64: put(&v.u, 8); break;
    case ValueType::I64: put(&v.i, 8); break;
    case ValueType::F32: { const auto x = static_cast<float>(v.f); put(&x, 4); break; }
    case ValueType::F64: put(&v.f, 8); break;
    case ValueType::BOOL: { const uint8_t x = v.b ? 1 : 0; put(&x, 1); break; }
    case ValueType::STRING: put_string(v.str); break;
    case ValueType::ARRAY: {
      const auto et = static_cast<uint32_t>(v.elem);
      const uint64_t n = v.arr.size();
      put(&et, 4);
      put(&n, 8);
      for (const Value& x : v.arr) {
        LFM_CHECK(x.type == v.elem, "gguf writer: array element of type ", value_type_name(x.type), " in an array of ",
                  value_type_name(v.elem));
        put_value(x);
      }
      break;
    }
  }
}

void GgufWriter::pad_to_alignment(uint64_t written) {
  static const char zeros[256] = {};
  uint64_t pad = (alignment_ - written % alignment_) % alignment_;
  while (pad) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof zeros));
    put(zeros, n);
    pad -= n;
  }
}

void GgufWriter::begin(const std::string& path) {
  LFM_CHECK(!f_, "gguf writer: begin() called twice");
  out_ = std::make_unique<OutputFile>(path, "gguf writer");
  f_ = out_->stream();
  static thread_local std::vector<char> buf(4 << 20);
  std::setvbuf(f_, buf.data(), _IOFBF, buf.size());

  if (alignment_ != 32) set("general.alignment", Value::of_u32(alignment_));
  const uint32_t magic = 0x46554747;
  put(&magic, 4);
  put(&kVersion, 4);
  const uint64_t n_tensors = tensors_.size(), n_kv = kv_.size();
  put(&n_tensors, 8);
  put(&n_kv, 8);
  for (const auto& [k, v] : kv_) {
    put_string(k);
    const auto t = static_cast<uint32_t>(v.type);
    put(&t, 4);
    put_value(v);
  }
  for (const Planned& t : tensors_) {
    put_string(t.name);
    const auto nd = static_cast<uint32_t>(t.ne.size());
    put(&nd, 4);
    for (int64_t d : t.ne) {
      const auto u = static_cast<uint64_t>(d);
      put(&u, 8);
    }
    const uint32_t type = ggml_from_dtype(t.type);
    put(&type, 4);
    put(&t.offset, 8);
  }
  pad_to_alignment(file_pos_);
  current_ = 0;
  current_done_ = 0;
}

void GgufWriter::write(const void* data, size_t n) {
  LFM_CHECK(f_, "gguf writer: write() before begin()");
  const auto* p = static_cast<const uint8_t*>(data);
  while (n) {
    LFM_CHECK(current_ < tensors_.size(), "gguf writer: more data than the declared tensors hold");
    const Planned& t = tensors_[current_];
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, t.nbytes - current_done_));
    put(p, take);
    p += take;
    n -= take;
    current_done_ += take;
    if (current_done_ == t.nbytes) {
      pad_to_alignment(t.nbytes);
      ++current_;
      current_done_ = 0;
    }
  }
}

void GgufWriter::finish() {
  LFM_CHECK(f_, "gguf writer: finish() before begin()");
  LFM_CHECK(current_ == tensors_.size(), "gguf writer: tensor '",
            current_ < tensors_.size() ? tensors_[current_].name : std::string(), "' was not written in full");
  f_ = nullptr;
  out_->commit();
}

}  // namespace lfm::gguf
