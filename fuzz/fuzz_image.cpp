// Image decoding (JPEG, PNG, WebP by magic, EXIF orientation) and LFM2-VL preprocessing of what
// decodes, under small limits so that every input is fast and a size bug shows as an allocation
// far over them. The first byte picks a small-tile processor config (exercising grids, thumbnail
// and the no-split path cheaply); the rest is the file.
#include "core/error.h"
#include "fuzz_util.h"
#include "image/image.h"
#include "image/lfm2vl_preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t choice = data[0];
  lfm::image::DecodeLimits limits;
  limits.max_pixels = 1 << 20;
  limits.max_side = 4096;
  limits.max_file_bytes = 2 << 20;
  try {
    const lfm::image::Image img = lfm::image::decode_image({data + 1, size - 1}, limits);
    if (img.rgb.size() != size_t(img.width) * img.height * 3) __builtin_trap();
    lfm::image::ProcessorConfig cfg;
    cfg.tile_size = 64;
    cfg.min_image_tokens = 2 + choice % 4;
    cfg.max_image_tokens = 8 + choice % 16;
    cfg.min_tiles = 1 + (choice >> 4) % 2;
    cfg.max_tiles = cfg.min_tiles + (choice >> 5) % 4;
    cfg.do_image_splitting = (choice & 0x80) == 0;
    cfg.use_thumbnail = (choice & 0x40) == 0;
    const lfm::image::PreprocessedImage p = lfm::image::preprocess(img, cfg);
    if (p.tiles.empty()) __builtin_trap();
  } catch (const lfm::Error&) {
  }
  return 0;
}
