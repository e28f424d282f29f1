// WebP through libwebp's animation decoder, the path PIL (built with WebP animation support, as
// Debian's is) takes for every WebP file: frame 0 composited on the canvas in RGBA (non-
// premultiplied), alpha then dropped by convert("RGB"). A still image gives exactly WebPDecode's
// pixels; an animated one gives its first frame (canvas outside it: transparent black → black).
// The EXIF chunk comes from the demuxer (PIL reads the same chunk).
#include <cstring>

#include <webp/decode.h>
#include <webp/demux.h>

#include "core/error.h"
#include "image/decoders.h"

namespace lfm::image::detail {

ImageHeader probe_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status == VP8_STATUS_OK || (features.width > 0 && features.height > 0))
    check_size("WebP", features.width, features.height, limits);
  LFM_CHECK(status != VP8_STATUS_NOT_ENOUGH_DATA, "image: WebP is truncated (", bytes.size(), " bytes)");
  LFM_CHECK(status == VP8_STATUS_OK, "image: WebP header is malformed (libwebp status ", int(status), ")");
  // The canvas the decoder allocates for is the demuxer's (VP8X), which WebPGetFeatures reports too;
  // read it as decode_webp does so that both agree.
  const WebPData data{bytes.data(), bytes.size()};
  WebPDemuxer* demux = WebPDemux(&data);
  LFM_CHECK(demux, "image: WebP is malformed or truncated (", bytes.size(), " bytes)");
  const uint32_t W = WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH), H = WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT);
  WebPDemuxDelete(demux);
  check_size("WebP", W, H, limits);
  return {"WebP", int(W), int(H)};
}

Decoded decode_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  const WebPData data{bytes.data(), bytes.size()};
  // The header (VP8X canvas, or the VP8/VP8L frame) first, so that the size is checked whatever
  // the rest of the file holds.
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status == VP8_STATUS_OK || (features.width > 0 && features.height > 0))  // a VP8X canvas alone gives its size
    check_size("WebP", features.width, features.height, limits);
  LFM_CHECK(status != VP8_STATUS_NOT_ENOUGH_DATA, "image: WebP is truncated (", bytes.size(), " bytes)");
  LFM_CHECK(status == VP8_STATUS_OK, "image: WebP header is malformed (libwebp status ", int(status), ")");
  // The demuxer only indexes chunks (no pixel memory): the canvas size is known before decoding.
  WebPDemuxer* demux = WebPDemux(&data);
  LFM_CHECK(demux, "image: WebP is malformed or truncated (", bytes.size(), " bytes)");
  struct DemuxGuard {
    WebPDemuxer* d;
    ~DemuxGuard() { WebPDemuxDelete(d); }
  } demux_guard{demux};
  const uint32_t W = WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH), H = WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT);
  check_size("WebP", W, H, limits);
  LFM_CHECK(WebPDemuxGetI(demux, WEBP_FF_FRAME_COUNT) >= 1, "image: WebP ", W, "x", H, " has no frame");

  Decoded d;
  WebPChunkIterator chunk;
  if (WebPDemuxGetChunk(demux, "EXIF", 1, &chunk)) {
    d.exif.assign(chunk.chunk.bytes, chunk.chunk.bytes + chunk.chunk.size);
    WebPDemuxReleaseChunkIterator(&chunk);
  }

  WebPAnimDecoderOptions opts;
  LFM_CHECK(WebPAnimDecoderOptionsInit(&opts), "image: libwebp version mismatch");
  opts.color_mode = MODE_RGBA;
  opts.use_threads = 0;
  WebPAnimDecoder* dec = WebPAnimDecoderNew(&data, &opts);
  LFM_CHECK(dec, "image: WebP ", W, "x", H, " cannot be decoded (malformed)");
  struct DecGuard {
    WebPAnimDecoder* d;
    ~DecGuard() { WebPAnimDecoderDelete(d); }
  } dec_guard{dec};
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  LFM_CHECK(WebPAnimDecoderGetNext(dec, &rgba, &timestamp) && rgba, "image: WebP ", W, "x", H,
            " frame 0 cannot be decoded (corrupt or truncated)");

  d.image.width = int(W);
  d.image.height = int(H);
  const size_t n = size_t(W) * H;
  d.image.rgb.resize(n * 3);
  for (size_t i = 0; i < n; ++i) std::memcpy(&d.image.rgb[3 * i], &rgba[4 * i], 3);
  return d;
}

}  // namespace lfm::image::detail
