// PNG through libpng, converted to RGB8 as PIL's PNG plugin plus convert("RGB") do it (PIL has its
// own PNG reader; the samples are the same, the mode mapping is what has to match):
//   grey 1/2/4/8-bit  scaled to 0..255 (×255, ×85, ×17, ×1) and replicated
//   grey 16-bit       PIL mode "I": convert("RGB") clips the 16-bit value to 0..255 (not >> 8)
//   RGB, grey+alpha, RGBA 16-bit   the high byte of each sample
//   palette           looked up in PLTE; an index past the palette gives grey (i, i, i), PIL's
//                     default palette ramp behind the file's entries
//   alpha, tRNS       dropped, never composited (convert("RGB") drops them)
// No gamma, sBIT or colour-profile transform is applied (PIL applies none).
//
// Errors: libpng calls on_error, which longjmps to the setjmp in run_decoder (a frame with no C++
// destructors); png_destroy_read_struct then frees everything and the message becomes an lfm::Error.
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <png.h>

#include "core/error.h"
#include "image/decoders.h"

namespace lfm::image::detail {

namespace {

struct State {
  png_structp png;
  png_infop info;
  std::jmp_buf jump;
  char message[256];
  const uint8_t* data;
  size_t size, pos;
  // Header (phase 1).
  png_uint_32 width, height;
  int bit_depth, color_type, interlace, passes;
};

extern "C" void on_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<State*>(png_get_error_ptr(png));
  std::snprintf(st->message, sizeof st->message, "%s", msg);
  std::longjmp(st->jump, 1);
}

extern "C" void on_warning(png_structp, png_const_charp) {}  // recoverable: ignored, as PIL does

extern "C" void on_read(png_structp png, png_bytep out, size_t n) {
  auto* st = static_cast<State*>(png_get_io_ptr(png));
  if (n > st->size - st->pos) png_error(png, "the file is truncated");
  std::memcpy(out, st->data + st->pos, n);
  st->pos += n;
}

// phase 1: header; 2: the rows into `rows` (one pointer per row, or per row of every pass when
// interlaced); 3: the chunks after the image. false on a libpng error.
bool run_decoder(State& st, int phase, png_bytepp rows, const DecodeLimits* limits) {
  if (setjmp(st.jump)) return false;
  if (phase == 1) {
    png_set_read_fn(st.png, &st, on_read);
    // The sides are checked by check_size right after the header (nothing large is allocated
    // before the first row is read); libpng's own default (10^6) is lifted to the format's limit so
    // that the message is ours. Any one chunk it buffers (compressed text, profiles) is capped at a
    // few MB, so a zTXt bomb stays small.
    png_set_user_limits(st.png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
    png_set_chunk_malloc_max(st.png, 8u << 20);
    png_read_info(st.png, st.info);
    png_get_IHDR(st.png, st.info, &st.width, &st.height, &st.bit_depth, &st.color_type, &st.interlace, nullptr,
                 nullptr);
    return true;
  }
  if (phase == 2) {
    if (st.bit_depth < 8) png_set_packing(st.png);  // one byte per sample, values unscaled
    st.passes = png_set_interlace_handling(st.png);
    png_read_update_info(st.png, st.info);
    png_read_image(st.png, rows);
    return true;
  }
  png_read_end(st.png, st.info);
  return true;
}

// ImageMagick's "Raw profile type exif" text chunk, as PIL's getexif reads it when there is no
// eXIf: bytes.fromhex("".join(text.split("\n")[3:])); empty when that would raise.
std::vector<uint8_t> raw_profile_exif(const std::string& text) {
  size_t at = 0;
  for (int line = 0; line < 3; ++line) {
    at = text.find('\n', at);
    if (at == std::string::npos) return {};
    ++at;
  }
  std::vector<uint8_t> out;
  int high = -1;
  for (size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') continue;  // removed by the join
    const bool space = c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
    if (space && high < 0) continue;  // fromhex skips whitespace between pairs only
    const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (v < 0) return {};
    if (high < 0) {
      high = v;
    } else {
      out.push_back(uint8_t(high * 16 + v));
      high = -1;
    }
  }
  return high < 0 ? out : std::vector<uint8_t>{};
}

}  // namespace

// Every chunk's length fits in what is left of the file: libpng otherwise sizes some buffers from
// a chunk's claimed length before reading it (fuzzing found a 381-byte file that made it allocate
// 2 GB). A file that ends inside a chunk is left to libpng (truncated).
void check_chunk_lengths(std::span<const uint8_t> bytes) {
  size_t at = 8;  // after the signature
  while (at + 8 <= bytes.size()) {
    const uint32_t len = uint32_t(bytes[at]) << 24 | uint32_t(bytes[at + 1]) << 16 | uint32_t(bytes[at + 2]) << 8 |
                         uint32_t(bytes[at + 3]);
    const std::string type(reinterpret_cast<const char*>(bytes.data() + at + 4), 4);
    LFM_CHECK(len <= bytes.size() - at - 8, "image: PNG chunk '", type, "' at byte ", at, " claims ", len,
              " bytes, the file has ", bytes.size() - at - 8, " left (truncated or corrupt)");
    if (type == "IEND") return;
    at += size_t(12) + len;  // length, type, data, CRC
  }
}

ImageHeader probe_png(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  check_chunk_lengths(bytes);
  State st;
  std::memset(&st, 0, sizeof st);
  st.data = bytes.data();
  st.size = bytes.size();
  st.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, on_error, on_warning);
  LFM_CHECK(st.png, "image: PNG decoder could not be created");
  st.info = png_create_info_struct(st.png);
  struct Destroy {
    State* s;
    ~Destroy() { png_destroy_read_struct(&s->png, s->info ? &s->info : nullptr, nullptr); }
  } destroy{&st};
  LFM_CHECK(st.info, "image: PNG decoder could not be created");
  if (!run_decoder(st, 1, nullptr, &limits)) fail("image: PNG header: ", st.message);
  check_size("PNG", st.width, st.height, limits);
  return {"PNG", int(st.width), int(st.height)};
}

Decoded decode_png(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  check_chunk_lengths(bytes);
  State st;
  std::memset(&st, 0, sizeof st);
  st.data = bytes.data();
  st.size = bytes.size();
  st.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, on_error, on_warning);
  LFM_CHECK(st.png, "image: PNG decoder could not be created");
  st.info = png_create_info_struct(st.png);
  struct Destroy {
    State* s;
    ~Destroy() { png_destroy_read_struct(&s->png, s->info ? &s->info : nullptr, nullptr); }
  } destroy{&st};
  LFM_CHECK(st.info, "image: PNG decoder could not be created");

  if (!run_decoder(st, 1, nullptr, &limits)) fail("image: PNG header: ", st.message);
  check_size("PNG", st.width, st.height, limits);
  const int W = int(st.width), H = int(st.height);
  const int ct = st.color_type, depth = st.bit_depth;
  const int channels = ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_PALETTE ? 1
                       : ct == PNG_COLOR_TYPE_GRAY_ALPHA                          ? 2
                       : ct == PNG_COLOR_TYPE_RGB                                 ? 3
                                                                                  : 4;
  const int sample_bytes = depth == 16 ? 2 : 1;
  const size_t stride = size_t(W) * channels * sample_bytes;

  png_colorp palette = nullptr;
  int palette_size = 0;
  if (ct == PNG_COLOR_TYPE_PALETTE) {
    LFM_CHECK(png_get_PLTE(st.png, st.info, &palette, &palette_size) == PNG_INFO_PLTE && palette_size > 0,
              "image: PNG palette image without a PLTE chunk");
  }

  // The samples as stored (at most 8 bytes a pixel, bounded by the size check above).
  std::vector<uint8_t> raw(stride * H);
  std::vector<png_bytep> rows(H);
  for (int y = 0; y < H; ++y) rows[y] = raw.data() + stride * y;
  if (!run_decoder(st, 2, rows.data(), &limits)) fail("image: PNG ", W, "x", H, " decoding: ", st.message);

  Decoded d;
  // eXIf, text and XMP may also follow the image data. A damaged tail is ignored: the pixels are
  // complete, and what was read before it is kept.
  run_decoder(st, 3, nullptr, &limits);
  {
    png_bytep exif = nullptr;
    png_uint_32 exif_size = 0;
    if (png_get_eXIf_1(st.png, st.info, &exif_size, &exif) && exif) d.exif.assign(exif, exif + exif_size);
    std::string raw_profile;
    png_textp text = nullptr;
    const int n_text = png_get_text(st.png, st.info, &text, nullptr);
    for (int i = 0; i < n_text; ++i) {
      const std::string key = text[i].key ? text[i].key : "";
      // libpng NUL-terminates every text; its length fields are not to be trusted (a malformed
      // iTXt chunk left itxt_length at 2 GB in fuzzing). No chunk is over the 8 MB cap.
      const std::string value = text[i].text ? std::string(text[i].text, strnlen(text[i].text, size_t(8) << 20)) : "";
      if (key == "XML:com.adobe.xmp") d.xmp = value;
      // ImageMagick's "Raw profile type exif": a header of three lines, then hex (PIL's getexif
      // reads it when there is no eXIf chunk).
      if (key == "Raw profile type exif") raw_profile = value;

    }
    if (d.exif.empty() && !raw_profile.empty()) d.exif = raw_profile_exif(raw_profile);
  }

  d.image.width = W;
  d.image.height = H;
  d.image.rgb.resize(size_t(W) * H * 3);
  uint8_t* o = d.image.rgb.data();
  const int grey_scale = depth == 1 ? 255 : depth == 2 ? 85 : depth == 4 ? 17 : 1;
  for (int y = 0; y < H; ++y) {
    const uint8_t* r = rows[y];
    for (int x = 0; x < W; ++x, o += 3) {
      const uint8_t* p = r + size_t(x) * channels * sample_bytes;
      switch (ct) {
        case PNG_COLOR_TYPE_GRAY: {
          const int v = depth == 16 ? std::min((p[0] << 8) | p[1], 255) : p[0] * grey_scale;
          o[0] = o[1] = o[2] = uint8_t(v);
          break;
        }
        case PNG_COLOR_TYPE_PALETTE: {
          if (p[0] < palette_size) {
            o[0] = palette[p[0]].red, o[1] = palette[p[0]].green, o[2] = palette[p[0]].blue;
          } else {
            o[0] = o[1] = o[2] = p[0];
          }
          break;
        }
        case PNG_COLOR_TYPE_GRAY_ALPHA: o[0] = o[1] = o[2] = p[0]; break;
        default:  // RGB, RGBA: the first (high) byte of each 16-bit sample
          o[0] = p[0], o[1] = p[sample_bytes], o[2] = p[2 * sample_bytes];
      }
    }
  }
  return d;
}

}  // namespace lfm::image::detail
