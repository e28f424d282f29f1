// The memory a request's images take on their way to the model, from their headers alone, so that
// it is checked against a budget before any pixel is decoded (issue 55: eight decompression bombs,
// each within the per-image limits, once took 2.2 GB). Figures are upper bounds in bytes:
//   held     per image, until the prompt is built: its RGB8 pixels (3 B/px), its tiles (float32
//            patches, preprocess_memory) twice (the preprocessed image and the engine's copy);
//   working  per image, on top of everything held, while it alone is decoded or preprocessed: the
//            decoder's buffers (stored samples, at most 8 B/px, or libwebp's two RGBA canvases)
//            plus an EXIF rotation's copy (3 B/px), or preprocessing's float32 planes and resizes.
// Images are decoded one after another and kept, then preprocessed one after another, so a request
// peaks at Σ held + max working (plus 1/16 for the allocator and the libraries' own state).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "image/image.h"
#include "image/lfm2vl_preprocess.h"

namespace lfm::image {

// The default budget of one request (lfm serve --image-memory-per-request; the C API and
// `lfm generate --image` use it as is): 1 GiB, a dozen 12-megapixel photos or one 35-megapixel one.
inline constexpr int64_t kDefaultRequestImageMemory = int64_t(1) << 30;

struct ImageMemory {
  int64_t held = 0, working = 0;
};

ImageMemory image_memory(const ImageHeader& header, const ProcessorConfig& config);

// Σ held + max working over the images, plus 1/16.
int64_t images_memory(std::span<const ImageHeader> headers, const ProcessorConfig& config);

// "3 images (8000x8000 PNG, 8000x8000 PNG, 640x480 JPEG) need about 2.6 GiB of image memory": for
// refusals (at most 8 sizes listed).
std::string describe_images_memory(std::span<const ImageHeader> headers, int64_t bytes);

// Throws lfm::Error "<what>: <describe_images_memory>, over the limit of <budget> (<how_to_raise>)"
// when the images need more than `budget` bytes.
void check_images_memory(std::span<const ImageHeader> headers, const ProcessorConfig& config, int64_t budget,
                         const std::string& what, const std::string& how_to_raise);

// 1536 → "1.5 KiB", 3 << 30 → "3.0 GiB".
std::string byte_size_text(int64_t bytes);

}  // namespace lfm::image
