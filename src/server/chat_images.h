// Images in chat requests (LFM2-VL): where an image part's URL may point, how big it may be,
// and the bytes → decoded image step, each refusal a 400 naming the part. Accepted: data URIs
// (data:image/png|jpeg|webp;base64,…), and files under the server's --image-dir (file:// URLs or
// paths) when it has one. Remote http(s) URLs are never fetched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base64.h"
#include "core/memory_budget.h"
#include "image/image.h"
#include "image/image_memory.h"

namespace lfm::server {

struct ImageOptions {
  size_t max_images = 8;               // per request (lfm serve --max-images)
  size_t max_image_bytes = 20u << 20;  // encoded bytes of one image (--max-image-bytes)
  // Local files: empty, none; else only regular files whose canonical path (symlinks resolved)
  // lies under this folder's canonical path (--image-dir).
  std::string image_dir;
  image::DecodeLimits decode;  // max_file_bytes is taken from max_image_bytes
  // Image memory (image/image_memory.h), checked from the headers before anything is decoded: what
  // one request's images may take (--image-memory-per-request; more: 413), and what all requests'
  // images may take at once (--image-memory; a request that fits alone but not now: 429 with
  // Retry-After; one over it even alone: 413).
  int64_t max_request_memory = image::kDefaultRequestImageMemory;
  int64_t max_server_memory = int64_t(2) << 30;
};

// One image part of a chat request, as parsed (api_types.cpp): its URL and the field it came from
// ("messages[0].content[1].image_url"), for errors.
struct ImagePart {
  std::string url;
  std::string param;
};

// decode_base64 (strict RFC 4648): core/base64.h.

// The decoded image behind `url`. Throws ApiError(400, …, param) for a URL it will not or cannot
// use: bad base64, a media type other than an image, an image over max_image_bytes or the decode
// limits, an undecodable image (the decoder's message), a remote URL, a file outside image_dir.
image::Image load_image_part(const ImagePart& part, const ImageOptions& opt);

// A request's decoded images and the server-wide image memory they hold until it is released (when
// the prompt is built and the images are freed).
struct LoadedImages {
  std::vector<image::Image> images;
  MemoryBudget::Reservation memory;
};

// Every part's image, in order, after the checks that need no decoding: the model takes images
// (`no_vision` empty; else it says why not), at most max_images of them, every header readable
// and within the decode limits, and their memory (for `processor`) within max_request_memory and,
// when `server_memory` is given, reserved from it (ApiError 413 / 429 as ImageOptions says).
LoadedImages load_image_parts(const std::vector<ImagePart>& parts, const ImageOptions& opt, const std::string& no_vision,
                              const image::ProcessorConfig& processor = {}, MemoryBudget* server_memory = nullptr);

}  // namespace lfm::server
