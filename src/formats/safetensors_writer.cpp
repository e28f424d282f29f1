#include "formats/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lfm {

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Entry>& entries,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), entries_(entries) {
  // nlohmann's ordered_json keeps declaration order, which is also the data order.
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const Entry& e : entries_) {
    LFM_CHECK(e.dtype == DType::F32 || e.dtype == DType::F16 || e.dtype == DType::BF16, "safetensors writer: tensor '",
              e.name, "' has type ", dtype_name(e.dtype), " (only F32, F16, BF16 are stored in safetensors)");
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    const size_t bytes = static_cast<size_t>(numel) * dtype_traits(e.dtype).block_bytes;
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    sizes_.push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep tensor data 8-byte aligned
  out_.open(path, std::ios::binary | std::ios::trunc);
  LFM_CHECK(out_.good(), "safetensors writer: cannot create '", path, "'");
  const uint64_t len = text.size();
  out_.write(reinterpret_cast<const char*>(&len), 8);
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
}

void SafetensorsWriter::write(const std::string& name, const void* data, size_t bytes) {
  LFM_CHECK(next_ < entries_.size(), "safetensors writer: more tensors written than declared ('", name, "')");
  LFM_CHECK(entries_[next_].name == name, "safetensors writer: expected tensor '", entries_[next_].name, "', got '",
            name, "'");
  LFM_CHECK(sizes_[next_] == bytes, "safetensors writer: tensor '", name, "' is ", bytes, " bytes, declared ",
            sizes_[next_]);
  out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  LFM_CHECK(out_.good(), "safetensors writer: write to '", path_, "' failed");
  ++next_;
}

void SafetensorsWriter::finish() {
  LFM_CHECK(next_ == entries_.size(), "safetensors writer: ", entries_.size() - next_, " declared tensors not written");
  out_.flush();
  LFM_CHECK(out_.good(), "safetensors writer: flush of '", path_, "' failed");
  out_.close();
}

}  // namespace lfm
