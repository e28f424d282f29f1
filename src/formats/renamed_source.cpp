#include "formats/renamed_source.h"

#include "core/error.h"

namespace lfm {

RenamedTensorSource::RenamedTensorSource(std::shared_ptr<const TensorSource> base,
                                         const std::vector<std::pair<std::string, std::string>>& prefixes)
    : base_(std::move(base)) {
  for (const std::string& name : base_->names())
    for (const auto& [from, to] : prefixes) {
      if (name.compare(0, from.size(), from) != 0) continue;
      const std::string ours = to + name.substr(from.size());
      auto [it, fresh] = to_base_.emplace(ours, name);
      LFM_CHECK(fresh, base_->origin(), ": tensors '", it->second, "' and '", name, "' both stand for '", ours, "'");
      break;
    }
}

const TensorView* RenamedTensorSource::find(const std::string& name) const {
  auto it = to_base_.find(name);
  return it == to_base_.end() ? nullptr : base_->find(it->second);
}

std::vector<std::string> RenamedTensorSource::names() const {
  std::vector<std::string> out;
  out.reserve(to_base_.size());
  for (const auto& [ours, theirs] : to_base_) out.push_back(ours);
  return out;
}

}  // namespace lfm
