#include "formats/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"

namespace lfm {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kSupported[] = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}};

DType parse_dtype(const std::string& s, const std::string& tensor, const std::string& path) {
  for (const auto& d : kSupported)
    if (s == d.name) return d.dtype;
  fail("safetensors: tensor '", tensor, "' in '", path, "' has unsupported dtype '", s,
       "' (supported: F32, F16, BF16)");
}

// A BatchNorm's training step counter (an I64 scalar "….num_batches_tracked", as PyTorch saves a
// BatchNorm1d): no op reads it, so it is left out of the tensors instead of failing the file on
// its integer type (a speech encoder's conv modules carry one each).
bool is_batch_norm_counter(const std::string& name, const json& info) {
  static const std::string kSuffix = ".num_batches_tracked";
  return name.size() > kSuffix.size() && name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0 &&
         info.is_object() && info.contains("dtype") && info["dtype"] == "I64";
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  origin_ = path;
  const size_t size = file_.size();
  LFM_CHECK(size >= 8, "safetensors: '", path, "' is ", size, " bytes, too short for the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_.data(), 8);  // little-endian on every supported host
  LFM_CHECK(header_len <= kMaxHeaderBytes, "safetensors: '", path, "' declares a header of ", header_len,
            " bytes (limit ", kMaxHeaderBytes, ")");
  LFM_CHECK(header_len <= size - 8, "safetensors: '", path, "' declares a header of ", header_len,
            " bytes but the file has only ", size - 8, " bytes after the length (truncated?)");
  const uint8_t* data = file_.data() + 8 + header_len;
  const size_t data_size = size - 8 - header_len;

  const json header = parse_json(
      std::string_view(reinterpret_cast<const char*>(file_.data()) + 8, static_cast<size_t>(header_len)),
      cat("safetensors: '", path, "' header"), /*unique_keys=*/true);
  LFM_CHECK(header.is_object(), "safetensors: '", path, "' header is not a JSON object");

  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      LFM_CHECK(info.is_object(), "safetensors: '", path, "' __metadata__ is not an object");
      for (const auto& [k, v] : info.items()) {
        LFM_CHECK(v.is_string(), "safetensors: '", path, "' __metadata__ value for '", k, "' is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (is_batch_norm_counter(name, info)) continue;
    LFM_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
              "safetensors: tensor '", name, "' in '", path, "' lacks dtype, shape or data_offsets");
    const auto& jd = info["dtype"];
    const auto& js = info["shape"];
    const auto& jo = info["data_offsets"];
    LFM_CHECK(jd.is_string(), "safetensors: tensor '", name, "' dtype is not a string");
    LFM_CHECK(js.is_array(), "safetensors: tensor '", name, "' shape is not a list");
    LFM_CHECK(jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned(),
              "safetensors: tensor '", name, "' data_offsets must be two non-negative integers, got ", json_excerpt(jo));
    TensorView v;
    v.dtype = parse_dtype(jd.get<std::string>(), name, path);
    uint64_t numel = 1;
    for (const auto& d : js) {
      LFM_CHECK(d.is_number_unsigned(), "safetensors: tensor '", name, "' has a bad dimension ", json_excerpt(d));
      const uint64_t dim = d.get<uint64_t>();
      LFM_CHECK(dim == 0 || numel <= (1ull << 48) / dim,
                "safetensors: tensor '", name, "' shape ", json_excerpt(js), " is absurdly large");
      numel *= dim;
      v.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    LFM_CHECK(begin <= end && end <= data_size, "safetensors: tensor '", name, "' offsets [", begin, ", ", end,
              ") exceed the data section of ", data_size, " bytes in '", path, "' (truncated file?)");
    const uint64_t expect = numel * dtype_traits(v.dtype).block_bytes;
    LFM_CHECK(end - begin == expect, "safetensors: tensor '", name, "' holds ", end - begin, " bytes but ",
              jd.get<std::string>(), " ", shape_str(v.shape), " needs ", expect);
    v.nbytes = end - begin;
    const uint8_t* p = data + begin;
    if (reinterpret_cast<uintptr_t>(p) % dtype_traits(v.dtype).block_bytes != 0) {
      // Kernels read elements in place; keep them naturally aligned.
      copies_.emplace_back(v.nbytes);
      std::memcpy(copies_.back().data(), p, v.nbytes);
      p = static_cast<const uint8_t*>(copies_.back().data());
    }
    v.data = p;
    ranges.push_back({begin, end, name});
    tensors_.emplace(name, std::move(v));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i)
    LFM_CHECK(ranges[i].begin >= ranges[i - 1].end, "safetensors: tensors '", ranges[i - 1].name, "' and '",
              ranges[i].name, "' overlap in '", path, "'");
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& dir) : origin_(dir) {
  namespace fs = std::filesystem;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const auto& n : files_.back()->names()) index_[n] = files_.back()->find(n);
    return;
  }
  LFM_CHECK(fs::exists(index), "checkpoint: '", dir, "' has neither model.safetensors nor model.safetensors.index.json");
  json j = parse_json(read_text_file(index.string(), "checkpoint:"), cat("checkpoint: '", index.string(), "'"),
                      /*unique_keys=*/true);
  LFM_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "checkpoint: '",
            index.string(), "' has no weight_map object");
  std::map<std::string, SafetensorsFile*> by_file;
  for (const auto& [name, file] : j["weight_map"].items()) {
    LFM_CHECK(file.is_string(), "checkpoint: weight_map entry for '", name, "' is not a file name");
    const std::string fname = file.get<std::string>();
    LFM_CHECK(fname.find('/') == std::string::npos && fname.find("..") == std::string::npos,
              "checkpoint: weight_map names a file outside the folder: '", fname, "'");
    if (!by_file.count(fname)) {
      files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / fname).string()));
      by_file[fname] = files_.back().get();
    }
    const TensorView* v = by_file[fname]->find(name);
    if (!v && is_batch_norm_counter(name, json{{"dtype", "I64"}})) continue;  // left out by the shard (above)
    LFM_CHECK(v, "checkpoint: tensor '", name, "' is listed in the index under '", fname, "' but that shard lacks it");
  }
  for (const auto& f : files_)
    for (const auto& n : f->names()) {
      LFM_CHECK(!index_.count(n), "checkpoint: tensor '", n, "' appears in more than one shard");
      index_[n] = f->find(n);
    }
}

const TensorView* SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : index_) out.push_back(k);
  return out;
}

size_t SafetensorsCheckpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [k, v] : index_) n += v->nbytes;
  return n;
}

}  // namespace lfm
