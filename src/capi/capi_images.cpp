// The C API's images (LFM2-VL): a prompt's files and in-memory bytes, and a chat image part's data
// URI, decoded as `lfm generate --image` and lfm serve's image_url parts decode them.
#include <algorithm>
#include <cctype>
#include <span>

#include "capi/capi_internal.h"
#include "core/base64.h"
#include "core/text.h"
#include "image/data_uri.h"
#include "image/image_memory.h"

using lfm::capi::fail;
using lfm::capi::require;

namespace lfm::capi {

namespace {

// At most 100 bytes of what the caller gave, for a message.
std::string shown(std::string_view s) { return s.size() <= 100 ? std::string(s) : std::string(s.substr(0, 100)) + "..."; }

}  // namespace

const ImagePromptSetup& image_setup(const lfm_model_state& s) {
  if (!s.image_setup) fail(LFM_ERR_UNSUPPORTED, "images: " + s.image_error);
  return *s.image_setup;
}

std::vector<PendingImage> prompt_images(const lfm_model_state& s, const lfm_prompt& p) {
  std::vector<PendingImage> out;
  if (p.n_images == 0) return out;
  image_setup(s);
  require(p.image_paths != nullptr || p.image_data != nullptr,
          "lfm_prompt: n_images is set but image_paths and image_data are both NULL");
  for (size_t i = 0; i < p.n_images; ++i) {
    PendingImage im;
    const std::string which = "lfm_prompt: image " + std::to_string(i);
    if (p.image_paths && p.image_paths[i]) {
      im.what = which + " ('" + p.image_paths[i] + "')";
      try {
        im.owned = image::read_image_file(p.image_paths[i]);
        im.bytes = im.owned;
        im.header = image::read_image_header(im.bytes);
      } catch (const Error& e) {
        fail(LFM_ERR_INVALID_ARGUMENT, im.what + ": " + e.what());
      }
      out.push_back(std::move(im));
      continue;
    }
    if (!p.image_data || !p.image_data[i] || !p.image_sizes)
      fail(LFM_ERR_INVALID_ARGUMENT, which + " has neither a path (image_paths) nor bytes (image_data, image_sizes)");
    // The caller's bytes are read in place (they outlive the submit call that decodes them).
    im.bytes = std::span<const uint8_t>(static_cast<const uint8_t*>(p.image_data[i]), p.image_sizes[i]);
    im.what = which + " (" + std::to_string(p.image_sizes[i]) + " bytes in memory)";
    try {
      im.header = image::read_image_header(im.bytes);
    } catch (const Error& e) {
      fail(LFM_ERR_INVALID_ARGUMENT, im.what + ": " + e.what());
    }
    out.push_back(std::move(im));
  }
  return out;
}

std::vector<image::Image> decode_images(const lfm_model_state& s, std::vector<PendingImage> pending) {
  std::vector<image::Image> out;
  if (pending.empty()) return out;
  // Every image's size is known from its header: the request's memory is checked before any of
  // them is decoded.
  std::vector<image::ImageHeader> headers;
  for (const PendingImage& im : pending) headers.push_back(im.header);
  try {
    image::check_images_memory(headers, image_setup(s).processor, image::kDefaultRequestImageMemory, "images",
                               "the C API's per-request image memory limit");
  } catch (const Error& e) {
    fail(LFM_ERR_INVALID_ARGUMENT, e.what());
  }
  out.reserve(pending.size());
  for (PendingImage& im : pending) {
    try {
      out.push_back(image::decode_image(im.bytes));
    } catch (const Error& e) {
      fail(LFM_ERR_INVALID_ARGUMENT, im.what + ": " + e.what());
    }
    im.owned = {};  // the encoded bytes are not needed any more
  }
  return out;
}

PendingImage image_from_data_uri(const std::string& url, const std::string& where) {
  const std::string head = ascii_lower(std::string_view(url).substr(0, std::min<size_t>(url.size(), 16)));
  if (head.rfind("http://", 0) == 0 || head.rfind("https://", 0) == 0)
    fail(LFM_ERR_INVALID_ARGUMENT, where + ": '" + shown(url) + "' is a remote URL; images are not fetched (send the "
                                               "bytes as a data:image/png;base64,... URI, or in lfm_prompt.image_data)");
  if (head.rfind("data:", 0) != 0)
    fail(LFM_ERR_INVALID_ARGUMENT, where + ": '" + shown(url) + "' is not a data: URI; a message's image part reads "
                                               "only data:image/...;base64 URIs (give files in lfm_prompt.image_paths "
                                               "and a {\"type\": \"image\"} part where each goes)");
  std::string_view data;
  try {
    data = image::parse_image_data_uri(url).data;
  } catch (const Error& e) {
    fail(LFM_ERR_INVALID_ARGUMENT, where + " " + e.what());
  }
  std::optional<std::vector<uint8_t>> bytes = decode_base64(data);
  if (!bytes) fail(LFM_ERR_INVALID_ARGUMENT, where + ": the data URI holds invalid base64 (RFC 4648, '=' padding, no "
                                                     "whitespace)");
  PendingImage im;
  im.owned = std::move(*bytes);
  im.bytes = im.owned;
  im.what = where;
  try {
    im.header = image::read_image_header(im.bytes);
  } catch (const Error& e) {
    fail(LFM_ERR_INVALID_ARGUMENT, where + ": not an image that can be used: " + e.what());
  }
  return im;
}

}  // namespace lfm::capi
