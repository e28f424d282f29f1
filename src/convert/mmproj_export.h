// Writing an LFM2-VL vision tower and projector as llama.cpp's mmproj GGUF (model/mmproj.h has the
// layout): matrices in F16 (F32 when asked), vectors, the position table and the patch embedding's
// conv kernel as llama.cpp's converter stores them, clip.* metadata that clip.cpp reads.
#pragma once

#include <string>

#include "formats/tensor_source.h"
#include "model/vision_config.h"

namespace lfm::gguf {

struct MmprojExportStats {
  uint64_t file_bytes = 0;
  int64_t tensors = 0;
};

// `vision` names the tensors "vision.…" / "projector.…" (vl_vision_prefixes). Written atomically.
MmprojExportStats write_mmproj_gguf(const std::string& path, const VisionConfig& cfg, const TensorSource& vision,
                                    bool f32, const std::string& name);

}  // namespace lfm::gguf
