#include "formats/gguf_info.h"

#include <map>
#include <sstream>

#include "formats/gguf_reader.h"
#include "formats/gguf_reader.h"

namespace lfm::gguf {

namespace {

struct TypeMix {
  int64_t tensors = 0, elements = 0;
  uint64_t bytes = 0;
};

std::map<std::string, TypeMix> type_mix(const GgufFile& f) {
  std::map<std::string, TypeMix> mix;
  for (const TensorInfo& t : f.tensors()) {
    TypeMix& m = mix[ggml_type_name(t.ggml_type)];
    m.tensors += 1;
    m.elements += t.numel();
    m.bytes += t.nbytes;
  }
  return mix;
}

}  // namespace

nlohmann::json gguf_summary_json(const std::string& path) {
  const GgufFile f(path);
  nlohmann::json j;
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["tensor_count"] = f.tensors().size();
  j["file_bytes"] = f.file_size();
  if (const Value* ft = f.find("general.file_type"); ft && ft->is_integer())
    j["file_type"] = file_type_name(ft->as_int("general.file_type"));
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [k, v] : f.metadata()) meta[k] = v.to_string(8);
  j["metadata"] = meta;
  uint64_t total = 0;
  for (const auto& [name, m] : type_mix(f)) {
    j["tensor_types"][name] = {{"tensors", m.tensors}, {"elements", m.elements}, {"bytes", m.bytes}};
    total += m.bytes;
  }
  j["tensor_bytes"] = total;
  return j;
}

std::string gguf_summary_text(const std::string& path) {
  const GgufFile f(path);
  std::ostringstream os;
  os << "gguf:         version " << f.version() << ", alignment " << f.alignment() << ", " << f.tensors().size()
     << " tensors, " << f.file_size() << " bytes";
  if (const Value* ft = f.find("general.file_type"); ft && ft->is_integer())
    os << ", file type " << file_type_name(ft->as_int("general.file_type"));
  os << "\ntensor types:\n";
  uint64_t total = 0;
  for (const auto& [name, m] : type_mix(f)) {
    os << "  " << name << ": " << m.tensors << " tensors, " << m.elements << " elements, " << m.bytes << " bytes\n";
    total += m.bytes;
  }
  os << "  total: " << total << " bytes (" << static_cast<double>(total) / 1048576.0 << " MiB)\n";
  os << "metadata (" << f.metadata().size() << " entries):\n";
  for (const auto& [k, v] : f.metadata()) os << "  " << k << " = " << v.to_string(8) << "\n";
  return os.str();
}

}  // namespace lfm::gguf
