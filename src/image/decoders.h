// Internal to src/image/: one decoder per format and the helpers they share. Each decoder
// checks the header's size against the limits (check_size) before it allocates the pixels.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "image/image.h"

namespace lfm::image::detail {

// Throws "image: <format> WxH exceeds ..." when a side is < 1 or over the limits.
void check_size(const char* format, int64_t width, int64_t height, const DecodeLimits& limits);

// A decoded image before EXIF orientation, plus the metadata that may carry the orientation.
struct Decoded {
  Image image;
  std::vector<uint8_t> exif;  // TIFF-structured EXIF block, with or without the "Exif\0\0" prefix
  std::string xmp;            // PNG iTXt "XML:com.adobe.xmp" (PIL reads tiff:Orientation from it)
};

Decoded decode_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits);
Decoded decode_png(std::span<const uint8_t> bytes, const DecodeLimits& limits);
Decoded decode_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits);
// The header alone, check_size applied (read_image_header).
ImageHeader probe_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits);
ImageHeader probe_png(std::span<const uint8_t> bytes, const DecodeLimits& limits);
ImageHeader probe_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits);

// EXIF Orientation as PIL's Image.getexif() reads it: IFD0 tag 0x0112 with one integer value, or
// XMP's tiff:Orientation when the EXIF has none; 0 when absent or unreadable.
int exif_orientation(std::span<const uint8_t> exif, const std::string& xmp);
// ImageOps.exif_transpose: orientation 2..8 → FLIP_LEFT_RIGHT, ROTATE_180, FLIP_TOP_BOTTOM,
// TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90; anything else leaves the image as it is.
Image apply_orientation(Image image, int orientation);

}  // namespace lfm::image::detail
