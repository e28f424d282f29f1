// check_ogg_vorbis_headers (ogg_preflight.h): libogg pages → packets → libvorbis header parsing.
#include "audio/ogg_preflight.h"

#include <ogg/ogg.h>
#include <vorbis/codec.h>

#include <cstring>

#include "core/error.h"

namespace lfm::audio {

namespace {

// The libogg/libvorbis states, cleared whatever happens.
struct State {
  ogg_sync_state sync;
  ogg_stream_state stream;
  bool stream_open = false;
  vorbis_info info;
  vorbis_comment comment;
  bool vorbis_open = false;
  State() { ogg_sync_init(&sync); }
  ~State() {
    if (vorbis_open) {
      vorbis_comment_clear(&comment);
      vorbis_info_clear(&info);
    }
    if (stream_open) ogg_stream_clear(&stream);
    ogg_sync_clear(&sync);
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

[[noreturn]] void corrupt(const char* what) { fail("audio: corrupt Ogg Vorbis headers: ", what); }

}  // namespace

void check_ogg_vorbis_headers(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  State s;
  // libogg copies what it is given; the input is bounded by the caller's max_bytes.
  char* buf = ogg_sync_buffer(&s.sync, long(bytes.size()));
  LFM_CHECK(buf, "audio: cannot buffer ", bytes.size(), " bytes of Ogg data");
  std::memcpy(buf, bytes.data(), bytes.size());
  ogg_sync_wrote(&s.sync, long(bytes.size()));

  ogg_page page;
  auto next_page = [&]() {
    for (;;) {
      const int r = ogg_sync_pageout(&s.sync, &page);
      if (r == 1) return true;
      if (r == 0) return false;  // no further complete page
    }                            // r < 0: bytes skipped to the next capture pattern
  };
  if (!next_page()) return;  // no page at all: libsndfile refuses it without reaching the Vorbis reader
  ogg_stream_init(&s.stream, ogg_page_serialno(&page));
  s.stream_open = true;
  ogg_packet packet;
  if (ogg_stream_pagein(&s.stream, &page) != 0 || ogg_stream_packetout(&s.stream, &packet) != 1) return;
  if (packet.bytes < 7 || std::memcmp(packet.packet, "\x01vorbis", 7) != 0) return;  // not Vorbis

  vorbis_info_init(&s.info);
  vorbis_comment_init(&s.comment);
  s.vorbis_open = true;
  if (!packet.b_o_s) corrupt("the first packet lacks the beginning-of-stream flag");
  if (ogg_stream_packetpeek(&s.stream, nullptr) != 0) corrupt("the first page holds more than the identification header");
  if (vorbis_synthesis_headerin(&s.info, &s.comment, &packet) < 0) corrupt("bad identification header");
  for (int got = 0; got < 2;) {
    const int r = ogg_stream_packetout(&s.stream, &packet);
    if (r == 0) {
      if (!next_page()) corrupt("the stream ends before its comment and setup headers");
      ogg_stream_pagein(&s.stream, &page);  // a page of another stream is ignored (as libsndfile does)
      continue;
    }
    if (r < 0) corrupt("a page is missing inside the comment and setup headers");
    if (vorbis_synthesis_headerin(&s.info, &s.comment, &packet) < 0) {
      corrupt(got == 0 ? "bad comment header" : "bad setup header");
    }
    ++got;
  }
}

}  // namespace lfm::audio
