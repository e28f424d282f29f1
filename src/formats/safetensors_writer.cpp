#include "formats/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>

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
  out_ = std::make_unique<OutputFile>(path, "safetensors writer");
  const uint64_t len = text.size();
  put(&len, 8);
  put(text.data(), text.size());
}

void SafetensorsWriter::put(const void* data, size_t bytes) {
  LFM_CHECK(std::fwrite(data, 1, bytes, out_->stream()) == bytes, "safetensors writer: write to '", out_->temp_path(),
            "' failed: ", std::strerror(errno), " (disk full?)");
}

void SafetensorsWriter::write(const std::string& name, const void* data, size_t bytes) {
  LFM_CHECK(next_ < entries_.size(), "safetensors writer: more tensors written than declared ('", name, "')");
  LFM_CHECK(entries_[next_].name == name, "safetensors writer: expected tensor '", entries_[next_].name, "', got '",
            name, "'");
  LFM_CHECK(sizes_[next_] == bytes, "safetensors writer: tensor '", name, "' is ", bytes, " bytes, declared ",
            sizes_[next_]);
  put(data, bytes);
  ++next_;
}

void SafetensorsWriter::finish() {
  LFM_CHECK(next_ == entries_.size(), "safetensors writer: ", entries_.size() - next_, " declared tensors not written");
  out_->commit();
}

}  // namespace lfm
