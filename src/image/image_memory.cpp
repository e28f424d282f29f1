#include "image/image_memory.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace lfm::image {

ImageMemory image_memory(const ImageHeader& h, const ProcessorConfig& config) {
  const int64_t px = int64_t(h.width) * h.height;
  const PreprocessMemory pre = preprocess_memory(h.width, h.height, config);
  ImageMemory m;
  m.held = 3 * px + 2 * pre.tiles;
  m.working = std::max((8 + 3) * px, pre.working);
  return m;
}

int64_t images_memory(std::span<const ImageHeader> headers, const ProcessorConfig& config) {
  int64_t held = 0, working = 0;
  for (const ImageHeader& h : headers) {
    const ImageMemory m = image_memory(h, config);
    held += m.held;
    working = std::max(working, m.working);
  }
  // The buffers above are what the code allocates; the allocator, libpng/libjpeg/libwebp's own
  // state and resize's tap tables come on top: 1/16 more (a single 64-megapixel PNG measured
  // 932 MiB of peak RSS growth against 934 MiB of buffers).
  const int64_t total = held + working;
  return total + total / 16;
}

std::string byte_size_text(int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string describe_images_memory(std::span<const ImageHeader> headers, int64_t bytes) {
  std::string sizes;
  for (size_t i = 0; i < headers.size() && i < 8; ++i)
    sizes += cat(i ? ", " : "", headers[i].width, "x", headers[i].height, " ", headers[i].format);
  if (headers.size() > 8) sizes += ", ...";
  return cat(headers.size(), headers.size() == 1 ? " image (" : " images (", sizes, ") need about ",
             byte_size_text(bytes), " of image memory to decode and preprocess");
}

void check_images_memory(std::span<const ImageHeader> headers, const ProcessorConfig& config, int64_t budget,
                         const std::string& what, const std::string& how_to_raise) {
  const int64_t need = images_memory(headers, config);
  LFM_CHECK(need <= budget, what, ": ", describe_images_memory(headers, need), ", over the limit of ",
            byte_size_text(budget), " (", how_to_raise, ")");
}

}  // namespace lfm::image
