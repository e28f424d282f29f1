// decode_image's dispatch by magic, file loading, the size check every decoder shares, and EXIF
// orientation (parsed as PIL's Image.getexif reads IFD0, applied as ImageOps.exif_transpose).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/file_io.h"
#include "image/decoders.h"

namespace lfm::image {

namespace detail {

void check_size(const char* format, int64_t width, int64_t height, const DecodeLimits& limits) {
  LFM_CHECK(width >= 1 && height >= 1, "image: ", format, " has an empty size ", width, "x", height);
  LFM_CHECK(width <= limits.max_side && height <= limits.max_side, "image: ", format, " ", width, "x", height,
            " exceeds the ", limits.max_side, "-pixel side limit");
  // Both sides are ≤ max_side (≤ 2^31), so the product cannot overflow int64.
  LFM_CHECK(width * height <= limits.max_pixels, "image: ", format, " ", width, "x", height, " exceeds the ",
            limits.max_pixels % (1LL << 20) == 0 ? cat(limits.max_pixels >> 20, "-megapixel")
                                                 : cat(limits.max_pixels, "-pixel"),
            " limit");
}

namespace {

// A bounds-checked reader over the TIFF structure inside an EXIF block.
struct TiffReader {
  std::span<const uint8_t> d;
  bool big_endian = false;
  bool has(size_t off, size_t n) const { return off <= d.size() && n <= d.size() - off; }
  uint32_t u16(size_t off) const {
    return big_endian ? (d[off] << 8) | d[off + 1] : d[off] | (d[off + 1] << 8);
  }
  uint32_t u32(size_t off) const {
    return big_endian ? (uint32_t(d[off]) << 24) | (d[off + 1] << 16) | (d[off + 2] << 8) | d[off + 3]
                      : d[off] | (d[off + 1] << 8) | (d[off + 2] << 16) | (uint32_t(d[off + 3]) << 24);
  }
};

int orientation_from_tiff(std::span<const uint8_t> exif) {
  if (exif.size() >= 6 && std::memcmp(exif.data(), "Exif\0\0", 6) == 0) exif = exif.subspan(6);
  TiffReader r{exif};
  if (!r.has(0, 8)) return 0;
  if (exif[0] == 'M' && exif[1] == 'M') r.big_endian = true;
  else if (!(exif[0] == 'I' && exif[1] == 'I')) return 0;
  if (r.u16(2) != 42) return 0;  // classic TIFF only (PIL also reads BigTIFF; cameras never write it)
  const size_t ifd = r.u32(4);
  if (!r.has(ifd, 2)) return 0;
  const uint32_t count = r.u16(ifd);
  // As PIL does, entries are read until the block ends (a truncated IFD keeps what was read).
  for (uint32_t i = 0; i < count && r.has(ifd + 2 + 12 * size_t(i), 12); ++i) {
    const size_t e = ifd + 2 + 12 * size_t(i);
    if (r.u16(e) != 0x0112) continue;
    const uint32_t type = r.u16(e + 2), n = r.u32(e + 4);
    if (n != 1) return 0;  // PIL gives a tuple (or fails): no transpose either way
    int64_t v;
    switch (type) {
      case 1: v = exif[e + 8]; break;                                  // BYTE
      case 6: v = int8_t(exif[e + 8]); break;                          // SBYTE
      case 3: v = r.u16(e + 8); break;                                 // SHORT (the standard type)
      case 8: v = int16_t(r.u16(e + 8)); break;                        // SSHORT
      case 4: v = r.u32(e + 8); break;                                 // LONG
      case 9: v = int32_t(r.u32(e + 8)); break;                        // SLONG
      default: return 0;  // rationals, floats, strings: not an orientation we act on
    }
    return v >= 1 && v <= 8 ? int(v) : 0;
  }
  return -1;  // no tag: the caller may look at XMP
}

}  // namespace

int exif_orientation(std::span<const uint8_t> exif, const std::string& xmp) {
  const int o = exif.empty() ? -1 : orientation_from_tiff(exif);
  if (o >= 0) return o;
  if (!xmp.empty()) {
    // PIL: re.search(r'tiff:Orientation(="|>)([0-9])', xmp) when IFD0 has no Orientation (searched
    // by hand: std::regex recurses per character and could exhaust the stack on a hostile chunk).
    const std::string key = "tiff:Orientation";
    for (size_t at = xmp.find(key); at != std::string::npos; at = xmp.find(key, at + 1)) {
      size_t p = at + key.size();
      if (xmp.compare(p, 2, "=\"") == 0) p += 2;
      else if (xmp.compare(p, 1, ">") == 0) p += 1;
      else continue;
      if (p < xmp.size() && xmp[p] >= '0' && xmp[p] <= '9') return xmp[p] - '0';
    }
  }
  return 0;
}

Image apply_orientation(Image in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const int W = in.width, H = in.height;
  const bool swap = orientation >= 5;  // TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90 swap the sides
  Image out;
  out.width = swap ? H : W;
  out.height = swap ? W : H;
  out.rgb.resize(in.rgb.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sy = y, sx = x;  // the source pixel of output (y, x)
      switch (orientation) {
        case 2: sx = W - 1 - x; break;                      // FLIP_LEFT_RIGHT
        case 3: sy = H - 1 - y; sx = W - 1 - x; break;      // ROTATE_180
        case 4: sy = H - 1 - y; break;                      // FLIP_TOP_BOTTOM
        case 5: sy = x; sx = y; break;                      // TRANSPOSE
        case 6: sy = H - 1 - x; sx = y; break;              // ROTATE_270 (90° clockwise)
        case 7: sy = H - 1 - x; sx = W - 1 - y; break;      // TRANSVERSE
        case 8: sy = x; sx = W - 1 - y; break;              // ROTATE_90 (90° counter-clockwise)
      }
      std::memcpy(&out.rgb[(size_t(y) * out.width + x) * 3], &in.rgb[(size_t(sy) * W + sx) * 3], 3);
    }
  }
  return out;
}

}  // namespace detail

namespace {

enum class Format { kJpeg, kPng, kWebp };

// The format by its magic bytes; anything else throws, naming the first bytes.
Format format_of(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  LFM_CHECK(bytes.size() <= limits.max_file_bytes, "image: file of ", bytes.size(), " bytes exceeds the ",
            limits.max_file_bytes, "-byte limit");
  auto starts = [&](const char* magic, size_t n, size_t at = 0) {
    return bytes.size() >= at + n && std::memcmp(bytes.data() + at, magic, n) == 0;
  };
  if (starts("\xFF\xD8\xFF", 3)) return Format::kJpeg;
  if (starts("\x89PNG\r\n\x1A\n", 8)) return Format::kPng;
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) return Format::kWebp;
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) head += cat(i ? " " : "", std::hex, int(bytes[i]));
  fail("image: unknown format (first bytes: ", bytes.empty() ? "none, the file is empty" : head,
       "); JPEG, PNG and WebP are supported");
}

}  // namespace

ImageHeader read_image_header(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  switch (format_of(bytes, limits)) {
    case Format::kJpeg: return detail::probe_jpeg(bytes, limits);
    case Format::kPng: return detail::probe_png(bytes, limits);
    case Format::kWebp: break;
  }
  return detail::probe_webp(bytes, limits);
}

Image decode_image(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  detail::Decoded d;
  switch (format_of(bytes, limits)) {
    case Format::kJpeg: d = detail::decode_jpeg(bytes, limits); break;
    case Format::kPng: d = detail::decode_png(bytes, limits); break;
    case Format::kWebp: d = detail::decode_webp(bytes, limits); break;
  }
  return detail::apply_orientation(std::move(d.image), detail::exif_orientation(d.exif, d.xmp));
}

std::vector<uint8_t> read_image_file(const std::string& path, const DecodeLimits& limits) {
  const int fd = open_regular_file(path, "image:");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  LFM_CHECK(::fstat(fd, &st) == 0, "image: cannot read '", path, "': ", std::strerror(errno));
  LFM_CHECK(uint64_t(st.st_size) <= limits.max_file_bytes, "image: '", path, "' has ", st.st_size,
            " bytes, over the ", limits.max_file_bytes, "-byte limit");
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    LFM_CHECK(n > 0, "image: cannot read '", path, "' in full");
    got += size_t(n);
  }
  return bytes;
}

Image load_image_file(const std::string& path, const DecodeLimits& limits) {
  const std::vector<uint8_t> bytes = read_image_file(path, limits);
  try {
    return decode_image(bytes, limits);
  } catch (const Error& e) {
    throw Error(cat(e.what(), " (", path, ")"));
  }
}

}  // namespace lfm::image
