// A check of an Ogg stream's Vorbis headers before libsndfile opens it (audio_decode.cpp).
//
// Why: libsndfile 1.2's Vorbis reader (ogg_vorbis.c, vorbis_read_header) allocates the decoder's
// setup (vorbis_info_init; then comments and codebooks as headers parse) and returns early on a
// malformed header without freeing it — its close hook is installed only after the headers parse.
// Every hostile Ogg upload would leak ~6 KB and up to the size of its header packets (found by
// fuzz/fuzz_audio.cpp). Here the same three headers are parsed with libogg + libvorbis, freeing
// everything, and a stream whose headers would take one of those early returns is refused first.
// Streams of other codecs (Opus, whose reader frees on failure) pass through unchecked.
#pragma once

#include <cstdint>
#include <span>

namespace lfm::audio {

// Throws lfm::Error ("audio: corrupt Ogg Vorbis headers: …") unless the first logical stream is not
// Vorbis or its identification, comment and setup headers all parse, as libsndfile reads them: a
// first page holding only the beginning-of-stream identification packet, then two more packets of
// that stream with no gap.
void check_ogg_vorbis_headers(std::span<const uint8_t> bytes);

}  // namespace lfm::audio
