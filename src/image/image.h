// Decoded images and the decoders that make them: JPEG (libjpeg-turbo), PNG (libpng) and WebP
// (libwebp), chosen by the file's magic bytes. The result is what transformers' load_image gives
// for the same bytes — PIL's decoding, ImageOps.exif_transpose, then convert("RGB") — pixel for
// pixel (tests/image_decode_test.cpp checks it against PIL):
//   JPEG   ISLOW DCT and fancy upsampling (libjpeg's and PIL's defaults); grey replicated; 4-channel
//          (CMYK/YCCK) treated as PIL does: Adobe-inverted, then PIL's cmyk2rgb.
//   PNG    every colour type and depth; alpha and tRNS dropped (not composited); 16-bit samples
//          keep their high byte, except 16-bit grey, which PIL opens as mode "I" and clips to 255.
//   WebP   lossy, lossless, alpha; an animated file gives its first frame on its canvas.
//   EXIF   Orientation 2–8 (JPEG APP1, PNG eXIf / "Raw profile type exif" / XMP tiff:Orientation,
//          WebP EXIF chunk) applied as a transpose; a malformed EXIF block is ignored.
// Hostile input is refused with lfm::Error before any large allocation: the header's size is
// checked against DecodeLimits first, so a decompression bomb never gets its buffer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lfm::image {

// HWC, RGB8: pixel (y, x) channel c is rgb[(y * width + x) * 3 + c]; rgb.size() == width*height*3.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

struct DecodeLimits {
  int64_t max_pixels = 64LL << 20;      // width * height, checked from the header before decoding
  int max_side = 32768;                 // either side
  size_t max_file_bytes = 64u << 20;    // the encoded bytes
};

// JPEG, PNG or WebP, by magic; anything else, or a corrupt/truncated file, throws lfm::Error.
Image decode_image(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});
// Reads the file (refusing one over limits.max_file_bytes before reading it) and decodes it.
Image load_image_file(const std::string& path, const DecodeLimits& limits = {});

// What the header says, read without decoding any pixel (the library reads the chunks or markers
// before the image data only): the format ("JPEG", "PNG", "WebP") and the size the decoder will
// allocate for, after the same DecodeLimits checks decode_image makes. Callers sum these over a
// request to check its memory before decoding anything (image_memory.h).
struct ImageHeader {
  const char* format = "";
  int width = 0, height = 0;
};
ImageHeader read_image_header(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});
// The file's bytes (a regular file, refused over limits.max_file_bytes before it is read).
std::vector<uint8_t> read_image_file(const std::string& path, const DecodeLimits& limits = {});

}  // namespace lfm::image
