// JPEG through libjpeg-turbo, configured as PIL's JpegDecode configures it: the library defaults
// (ISLOW DCT, fancy upsampling), out_color_space GRAYSCALE / RGB / CMYK by component count. PIL
// then treats every 4-component file as Adobe-inverted CMYK ("CMYK;I") and converts to RGB with
// its cmyk2rgb; both are reproduced here. A file that ends early is refused, as PIL refuses it
// ("image file is truncated"); libjpeg's other warnings (corrupt data it recovers from) are
// ignored, as PIL ignores them.
//
// libjpeg reports errors by calling error_exit, which must not return. It longjmps back to the
// setjmp in run_decoder, a function whose frame holds only trivially destructible state: no C++
// destructor is ever skipped and no exception crosses libjpeg's C frames. The message is turned
// into an lfm::Error after jpeg_destroy_decompress has freed libjpeg's memory.
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE
#include <cstring>

#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"
#include "image/decoders.h"

namespace lfm::image::detail {

namespace {

// A progressive file may hold any number of scans, each a full pass over the coefficients; a tiny
// file with thousands of them would take minutes. libjpeg's documentation suggests this bound.
constexpr int kMaxScans = 1000;

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg passes &pub, cast back below
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

extern "C" void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

extern "C" void on_emit_message(j_common_ptr cinfo, int level) {
  // level -1: a warning. Only the end of the data matters (see above); the rest is recoverable.
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    err->truncated = true;
    std::snprintf(err->message, sizeof err->message, "the file is truncated");
    std::longjmp(err->jump, 1);
  }
}

extern "C" void on_progress(j_common_ptr cinfo) {
  if (cinfo->is_decompressor) {
    auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->input_scan_number > kMaxScans) {
      auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
      std::snprintf(err->message, sizeof err->message, "more than %d progressive scans", kMaxScans);
      std::longjmp(err->jump, 1);
    }
  }
}

struct Header {
  int width = 0, height = 0, components = 0;
  std::vector<uint8_t> exif;  // the first APP1 "Exif\0" segment, as PIL keeps it
};

// Everything libjpeg touches lives in this POD block, owned by the caller.
struct State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  jpeg_progress_mgr progress;
};

// Phase 1 reads the header (and saved markers) and returns; phase 2 decodes into `out`
// (width*height*components bytes, allocated by the caller after the size check). Returns false
// with st.err.message set on any libjpeg error. Nothing in this frame has a destructor.
bool run_decoder(State& st, const uint8_t* data, size_t size, int phase, uint8_t* out) {
  if (setjmp(st.err.jump)) return false;
  if (phase == 1) {
    jpeg_create_decompress(&st.cinfo);  // inside the setjmp: it can fail (out of memory)
    st.cinfo.progress = &st.progress;
    jpeg_mem_src(&st.cinfo, data, static_cast<unsigned long>(size));
    jpeg_save_markers(&st.cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&st.cinfo, TRUE);
    return true;
  }
  jpeg_start_decompress(&st.cinfo);
  const size_t stride = size_t(st.cinfo.output_width) * st.cinfo.output_components;
  while (st.cinfo.output_scanline < st.cinfo.output_height) {
    JSAMPROW row = out + size_t(st.cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&st.cinfo, &row, 1);
  }
  // No jpeg_finish_decompress: PIL stops once it has every row, so a missing EOI after complete
  // scan data is accepted by both.
  return true;
}

// PIL's cmyk2rgb (Convert.c) on CMYK that was stored inverted (rawmode "CMYK;I").
inline uint8_t muldiv255(int a, int b) {
  const int t = a * b + 128;
  return uint8_t(((t >> 8) + t) >> 8);
}

}  // namespace

ImageHeader probe_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  State st;
  std::memset(&st, 0, sizeof st);
  st.cinfo.err = jpeg_std_error(&st.err.pub);
  st.err.pub.error_exit = on_error_exit;
  st.err.pub.emit_message = on_emit_message;
  st.progress.progress_monitor = on_progress;
  struct Destroy {
    jpeg_decompress_struct* c;
    ~Destroy() { jpeg_destroy_decompress(c); }
  } destroy{&st.cinfo};
  if (!run_decoder(st, bytes.data(), bytes.size(), 1, nullptr)) fail("image: JPEG header failed: ", st.err.message);
  const int comps = st.cinfo.num_components;
  LFM_CHECK(comps == 1 || comps == 3 || comps == 4, "image: JPEG with ", comps,
            " components is not supported (1, 3 or 4)");
  check_size("JPEG", st.cinfo.image_width, st.cinfo.image_height, limits);
  return {"JPEG", int(st.cinfo.image_width), int(st.cinfo.image_height)};
}

Decoded decode_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  State st;
  std::memset(&st, 0, sizeof st);
  st.cinfo.err = jpeg_std_error(&st.err.pub);
  st.err.pub.error_exit = on_error_exit;
  st.err.pub.emit_message = on_emit_message;
  st.progress.progress_monitor = on_progress;
  // Frees libjpeg's memory on every path out of this function (a no-op if creation failed: the
  // struct was zeroed and jpeg_destroy checks its memory manager).
  struct Destroy {
    jpeg_decompress_struct* c;
    ~Destroy() { jpeg_destroy_decompress(c); }
  } destroy{&st.cinfo};

  auto fail_with = [&](const char* stage) -> void {
    fail("image: JPEG ", stage, " failed: ", st.err.message);
  };
  if (!run_decoder(st, bytes.data(), bytes.size(), 1, nullptr)) fail_with("header");

  Decoded d;
  for (jpeg_saved_marker_ptr m = st.cinfo.marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 5 && std::memcmp(m->data, "Exif\0", 5) == 0) {
      d.exif.assign(m->data, m->data + m->data_length);
      break;
    }
  }
  const int comps = st.cinfo.num_components;
  LFM_CHECK(comps == 1 || comps == 3 || comps == 4, "image: JPEG with ", comps,
            " components is not supported (1, 3 or 4)");
  check_size("JPEG", st.cinfo.image_width, st.cinfo.image_height, limits);
  st.cinfo.out_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;

  const int W = int(st.cinfo.image_width), H = int(st.cinfo.image_height);
  std::vector<uint8_t> raw(size_t(W) * H * comps);
  if (!run_decoder(st, bytes.data(), bytes.size(), 2, raw.data())) fail_with("decoding");
  LFM_CHECK(int(st.cinfo.output_width) == W && int(st.cinfo.output_height) == H &&
                st.cinfo.output_components == comps,
            "image: JPEG decoder produced ", st.cinfo.output_width, "x", st.cinfo.output_height, "x",
            st.cinfo.output_components, " for a ", W, "x", H, "x", comps, " header");

  d.image.width = W;
  d.image.height = H;
  if (comps == 3) {
    d.image.rgb = std::move(raw);
    return d;
  }
  d.image.rgb.resize(size_t(W) * H * 3);
  uint8_t* o = d.image.rgb.data();
  const size_t n = size_t(W) * H;
  if (comps == 1) {
    for (size_t i = 0; i < n; ++i) o[3 * i] = o[3 * i + 1] = o[3 * i + 2] = raw[i];
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = &raw[4 * i];
      const int nk = p[3];  // 255 - (255 - k): the inversion of "CMYK;I" folded in
      for (int c = 0; c < 3; ++c) {
        const int v = nk - muldiv255(255 - p[c], nk);
        o[3 * i + c] = uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  }
  return d;
}

}  // namespace lfm::image::detail
