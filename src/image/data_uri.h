// An image's data: URI (RFC 2397), as OpenAI-style image_url parts carry one: the media type
// checked against what the decoders read, and the base64 payload (not yet decoded, so a caller can
// bound its size first). Shared by lfm serve's image parts and the C API's chat image parts.
#pragma once

#include <string>
#include <string_view>

namespace lfm::image {

struct DataUri {
  std::string media;      // lower case: image/png, image/jpeg, image/jpg or image/webp
  std::string_view data;  // the base64 text after the ',' (a view into the URI)
};

// `uri` must start with "data:" (any case). Throws lfm::Error whose message reads after the
// part's name ("is a data URI without the ','…", "must be base64-encoded…", "…not supported…").
DataUri parse_image_data_uri(std::string_view uri);

}  // namespace lfm::image
