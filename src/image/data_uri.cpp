#include "image/data_uri.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace lfm::image {

DataUri parse_image_data_uri(std::string_view uri) {
  const std::string_view rest = uri.substr(std::min<size_t>(5, uri.size()));  // after "data:"
  const size_t comma = rest.find(',');
  if (comma == std::string_view::npos) throw Error("is a data URI without the ',' that starts its data");
  const std::string_view meta = rest.substr(0, comma);
  std::vector<std::string> fields;  // media type, parameters, then maybe "base64"
  for (size_t at = 0; at <= meta.size();) {
    const size_t semi = std::min(meta.find(';', at), meta.size());
    fields.push_back(ascii_lower(meta.substr(at, semi - at)));
    at = semi + 1;
  }
  const bool base64 = fields.size() > 1 && fields.back() == "base64";
  const std::string& media = fields[0];
  if (media.rfind("image/", 0) != 0)
    throw Error("is a data URI of media type '" + excerpt(media.empty() ? "text/plain" : media) +
                "', not an image (image/png, image/jpeg or image/webp)");
  if (media != "image/png" && media != "image/jpeg" && media != "image/jpg" && media != "image/webp")
    throw Error("is a data URI of type '" + excerpt(media) + "', which is not supported (image/png, image/jpeg, image/webp)");
  if (!base64) throw Error("must be base64-encoded: data:" + media + ";base64,…");
  return {media, rest.substr(comma + 1)};
}

}  // namespace lfm::image
