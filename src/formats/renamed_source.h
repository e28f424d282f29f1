// A view of part of another TensorSource under other names: the tensors whose names start with
// one of the `from` prefixes, that prefix replaced by its `to` (the first matching pair wins).
// Used to present one file's sub-models (a vision-language checkpoint's language model, vision
// tower and projector) to loaders that expect their own names. The base stays shared.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/tensor_source.h"

namespace lfm {

class RenamedTensorSource : public TensorSource {
 public:
  RenamedTensorSource(std::shared_ptr<const TensorSource> base,
                      const std::vector<std::pair<std::string, std::string>>& prefixes);
  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string origin() const override { return base_->origin(); }
  void drop_pages(const TensorView& t) const override { base_->drop_pages(t); }
  // The base holds other views' tensors too: it keeps its files.
  void detach(const std::vector<std::pair<const void*, size_t>>&) const override {}

 private:
  std::shared_ptr<const TensorSource> base_;
  std::map<std::string, std::string> to_base_;  // our name → the base's
};

}  // namespace lfm
