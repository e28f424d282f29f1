#include "server/chat_images.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"
#include "core/text.h"
#include "image/data_uri.h"
#include "server/api_types.h"

namespace lfm::server {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void refuse(const ImagePart& part, const std::string& message) {
  throw ApiError(400, "'" + part.param + "' " + message, part.param);
}

std::string limit_text(size_t bytes) {
  return std::to_string(bytes) + " bytes (lfm serve --max-image-bytes)";
}

image::DecodeLimits decode_limits(const ImageOptions& opt) {
  image::DecodeLimits limits = opt.decode;
  limits.max_file_bytes = opt.max_image_bytes;
  return limits;
}

// An image part's encoded bytes and what their header says (nothing decoded yet).
struct Fetched {
  std::vector<uint8_t> bytes;
  image::ImageHeader header;
};

Fetched with_header(const ImagePart& part, std::vector<uint8_t> bytes, const ImageOptions& opt) {
  Fetched f{std::move(bytes), {}};
  try {
    f.header = image::read_image_header(f.bytes, decode_limits(opt));
  } catch (const Error& e) {
    refuse(part, std::string("is not an image this server can use: ") + e.what());
  }
  return f;
}

image::Image decode(const ImagePart& part, std::span<const uint8_t> bytes, const ImageOptions& opt) {
  try {
    return image::decode_image(bytes, decode_limits(opt));
  } catch (const Error& e) {
    refuse(part, std::string("is not an image this server can use: ") + e.what());
  }
}

Fetched from_data_uri(const ImagePart& part, std::string_view uri, const ImageOptions& opt) {
  std::string_view data;
  try {
    data = image::parse_image_data_uri(uri).data;
  } catch (const Error& e) {
    refuse(part, e.what());
  }
  // Refused from its length before anything is decoded.
  if (data.size() / 4 * 3 > opt.max_image_bytes + 2)
    refuse(part, "holds an image of about " + std::to_string(data.size() / 4 * 3) + " bytes, over this server's limit of " +
                     limit_text(opt.max_image_bytes));
  std::optional<std::vector<uint8_t>> bytes = decode_base64(data);
  if (!bytes)
    refuse(part, "holds invalid base64 (RFC 4648: A–Z a–z 0–9 + /, '=' padding to a multiple of 4, no whitespace)");
  if (bytes->empty()) refuse(part, "holds no image data");
  if (bytes->size() > opt.max_image_bytes)
    refuse(part, "holds an image of " + std::to_string(bytes->size()) + " bytes, over this server's limit of " +
                     limit_text(opt.max_image_bytes));
  return with_header(part, std::move(*bytes), opt);
}

// "%41" → "A"; nullopt for a bad escape or a NUL.
std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
      return std::nullopt;
    const char c = static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
    if (c == '\0') return std::nullopt;
    out += c;
    i += 2;
  }
  return out;
}

// Whether `p` is inside `dir` (both canonical): dir's components are a proper prefix of p's.
bool inside(const fs::path& p, const fs::path& dir) {
  auto [d, q] = std::mismatch(dir.begin(), dir.end(), p.begin(), p.end());
  return d == dir.end() && q != p.end();
}

Fetched from_file(const ImagePart& part, const std::string& given, const ImageOptions& opt) {
  if (opt.image_dir.empty())
    refuse(part, "names a local file; this server reads image files only when started with --image-dir DIR "
                 "(send the image inline as a data:image/png;base64,… URI)");
  std::string path = given;
  if (ascii_lower(std::string_view(given).substr(0, std::min<size_t>(given.size(), 5))) == "file:") {
    std::string_view rest = std::string_view(given).substr(5);
    if (rest.rfind("//", 0) == 0) {
      rest.remove_prefix(2);
      if (rest.rfind("localhost/", 0) == 0) rest.remove_prefix(9);
    }
    if (rest.empty() || rest[0] != '/') refuse(part, "must be a file URL with an absolute path: file:///path/to/image.png");
    auto decoded = percent_decode(rest);
    if (!decoded) refuse(part, "is a file URL with a bad %-escape");
    path = *decoded;
  }
  if (path.empty() || path.find('\0') != std::string::npos) refuse(part, "is an empty or malformed path");
  // One answer for a file that does not exist, lies outside the folder (after symlinks), or is
  // not a regular file: the client learns nothing about the rest of the file system.
  const std::string not_there = "names '" + excerpt(given) + "', which is not an image file under this server's --image-dir";
  std::error_code ec;
  const fs::path dir = fs::canonical(opt.image_dir, ec);
  if (ec) throw ApiError(500, "the server's --image-dir '" + opt.image_dir + "' cannot be read: " + ec.message());
  fs::path p(path);
  if (p.is_relative()) p = dir / p;
  const fs::path canon = fs::canonical(p, ec);
  if (ec || !inside(canon, dir)) refuse(part, not_there);
  // O_NOFOLLOW: the last component must not have become a symlink since it was resolved.
  const int fd = ::open(canon.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) refuse(part, not_there);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) refuse(part, not_there);
  if (static_cast<uint64_t>(st.st_size) > opt.max_image_bytes)
    refuse(part, "is a file of " + std::to_string(st.st_size) + " bytes, over this server's limit of " +
                     limit_text(opt.max_image_bytes));
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n <= 0) refuse(part, "could not be read in full");
    got += static_cast<size_t>(n);
  }
  return with_header(part, std::move(bytes), opt);
}

Fetched fetch_image_part(const ImagePart& part, const ImageOptions& opt) {
  const std::string& url = part.url;
  const std::string head = ascii_lower(std::string_view(url).substr(0, std::min<size_t>(url.size(), 16)));
  if (head.rfind("data:", 0) == 0) return from_data_uri(part, url, opt);
  if (head.rfind("http://", 0) == 0 || head.rfind("https://", 0) == 0)
    refuse(part, "is a remote URL; this server does not fetch images over the network (no option enables it): "
                 "send the image inline as a data:image/png;base64,… URI");
  // Any other scheme (letters, then digits + - . allowed, then ':') but file:.
  size_t i = 0;
  while (i < url.size() && (std::isalpha(static_cast<unsigned char>(url[i])) ||
                            (i > 0 && (std::isdigit(static_cast<unsigned char>(url[i])) || url[i] == '+' ||
                                       url[i] == '-' || url[i] == '.'))))
    ++i;
  if (i > 1 && i < url.size() && url[i] == ':' && head.rfind("file:", 0) != 0)
    refuse(part, "has the URL scheme '" + excerpt(url.substr(0, i)) + "', which is not supported (data: URIs" +
                     (opt.image_dir.empty() ? "" : ", file: URLs and paths under --image-dir") + ")");
  return from_file(part, url, opt);
}

}  // namespace

image::Image load_image_part(const ImagePart& part, const ImageOptions& opt) {
  const Fetched f = fetch_image_part(part, opt);
  return decode(part, f.bytes, opt);
}

LoadedImages load_image_parts(const std::vector<ImagePart>& parts, const ImageOptions& opt, const std::string& no_vision,
                              const image::ProcessorConfig& processor, MemoryBudget* server_memory) {
  LoadedImages out;
  if (parts.empty()) return out;
  if (!no_vision.empty()) throw ApiError(400, no_vision, parts[0].param);
  if (parts.size() > opt.max_images)
    throw ApiError(400,
                   "the request has " + std::to_string(parts.size()) + " images; this server takes at most " +
                       std::to_string(opt.max_images) + " per request (lfm serve --max-images)",
                   parts[opt.max_images].param);
  // Every part's bytes and header first: the request's image memory is known before any pixel is
  // decoded. (The encoded bytes are bounded by max_images x max_image_bytes, and data URIs by the
  // body they came in.)
  std::vector<Fetched> fetched;
  fetched.reserve(parts.size());
  for (const ImagePart& p : parts) fetched.push_back(fetch_image_part(p, opt));
  std::vector<image::ImageHeader> headers;
  for (const Fetched& f : fetched) headers.push_back(f.header);
  const int64_t need = image::images_memory(headers, processor);
  const std::string what = "the request's " + image::describe_images_memory(headers, need);
  const std::string param = parts.size() == 1 ? parts[0].param : "messages";
  if (need > opt.max_request_memory)
    throw ApiError(413,
                   what + ", over this server's limit of " + image::byte_size_text(opt.max_request_memory) +
                       " per request (lfm serve --image-memory-per-request)",
                   param, "image_memory_exceeded");
  if (server_memory) {
    if (need > server_memory->capacity())
      throw ApiError(413,
                     what + ", over this server's limit of " + image::byte_size_text(server_memory->capacity()) +
                         " for all requests together (lfm serve --image-memory)",
                     param, "image_memory_exceeded");
    std::optional<MemoryBudget::Reservation> r = server_memory->try_reserve(need);
    if (!r) {
      ApiError busy(429,
                    what + "; other requests hold " + image::byte_size_text(server_memory->in_use()) + " of the server's " +
                        image::byte_size_text(server_memory->capacity()) + " (lfm serve --image-memory): retry shortly",
                    param, "image_memory_busy");
      busy.retry_after_s = 1;
      throw busy;
    }
    out.memory = std::move(*r);
  }
  out.images.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    out.images.push_back(decode(parts[i], fetched[i].bytes, opt));
    fetched[i].bytes = {};
  }
  return out;
}

}  // namespace lfm::server
