// Images in chat requests, below HTTP (server/chat_images.h, api_types.cpp): the strict base64
// decoder, data URIs, where files may come from (--image-dir: canonical paths, no `..` or
// symlink escapes), the byte and count limits, and how image parts become template parts. Each
// refusal is an ApiError 400 naming the part. The same over HTTP: server_vl_test.cpp.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "server/api_types.h"
#include "server/chat_images.h"
#include "test_util.h"

namespace lfm::server {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string b64(const std::string& bytes) {  // OpenSSL's encoder: independent of the decoder tested
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string vl_image(const std::string& name) { return test::data_dir() + "/hf_vl/images/" + name; }

// The message of the ApiError that `f` throws (its status and param checked), or "no error".
template <typename F>
std::string refusal(F f, const std::string& param = "p") {
  try {
    f();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.what();
    EXPECT_EQ(e.param, param) << e.what();
    return e.what();
  }
  return "no error";
}

#define EXPECT_HAS(text, needle) EXPECT_NE(std::string(text).find(needle), std::string::npos) << (text)

TEST(ServerImages, Base64IsStrict) {
  for (const std::string& s : std::vector<std::string>{"", "f", "fo", "foo", "foob", "fooba", "foobar", std::string("\0\xff\x10", 3)}) {
    auto d = decode_base64(b64(s));
    ASSERT_TRUE(d) << s;
    EXPECT_EQ(std::string(d->begin(), d->end()), s);
  }
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  auto d = decode_base64(b64(all + all));
  ASSERT_TRUE(d);
  EXPECT_EQ(std::string(d->begin(), d->end()), all + all);
  for (const char* bad : {"Zm9", "Zm9v\n", "Zm 9v", "Zm9v====", "Zg=", "Z===", "====", "Zm=v", "Zm9v-_==", "Zh==",
                          "Zm9=", "Zm9vYg=a", "@@@@"})
    EXPECT_FALSE(decode_base64(bad)) << bad;  // "Zh==" and "Zm9=": non-zero unused bits
}

TEST(ServerImages, DataUrisDecodeOrAreRefusedClearly) {
  const std::string png = test::read_file(vl_image("rgb_37x53.png"));
  ImageOptions o;
  const image::Image im = load_image_part({"data:image/png;base64," + b64(png), "p"}, o);
  EXPECT_EQ(im.width, 37);
  EXPECT_EQ(im.height, 53);
  // The media type is case-insensitive; the decoder goes by the bytes' magic.
  EXPECT_EQ(load_image_part({"DATA:Image/JPEG;base64," + b64(png), "p"}, o).width, 37);
  EXPECT_HAS(refusal([&] { load_image_part({"data:image/png;base64,Zm9v YmFy", "p"}, o); }), "invalid base64");
  EXPECT_HAS(refusal([&] { load_image_part({"data:image/png;base64," + b64("GIF89a....."), "p"}, o); }),
             "unknown format");
  EXPECT_HAS(refusal([&] { load_image_part({"data:image/png;base64," + b64(png.substr(0, 200)), "p"}, o); }),
             "is not an image this server can use: image:");
  EXPECT_HAS(refusal([&] { load_image_part({"data:text/plain;base64," + b64("hi"), "p"}, o); }),
             "media type 'text/plain', not an image");
  EXPECT_HAS(refusal([&] { load_image_part({"data:;base64," + b64("hi"), "p"}, o); }), "'text/plain'");
  EXPECT_HAS(refusal([&] { load_image_part({"data:image/gif;base64," + b64("hi"), "p"}, o); }), "not supported");
  EXPECT_HAS(refusal([&] { load_image_part({"data:image/png," + png, "p"}, o); }), "must be base64-encoded");
  EXPECT_HAS(refusal([&] { load_image_part({"data:image/png;base64", "p"}, o); }), "without the ','");
  EXPECT_HAS(refusal([&] { load_image_part({"data:image/png;base64,", "p"}, o); }), "holds no image data");
  o.max_image_bytes = png.size() - 1;
  EXPECT_HAS(refusal([&] { load_image_part({"data:image/png;base64," + b64(png), "p"}, o); }),
             "over this server's limit of " + std::to_string(png.size() - 1) + " bytes");
  o.max_image_bytes = 20 << 20;
  o.decode.max_side = 36;  // the decoder's limits are the server's
  EXPECT_HAS(refusal([&] { load_image_part({"data:image/png;base64," + b64(png), "p"}, o); }), "image:");
}

TEST(ServerImages, RemoteUrlsAndOtherSchemesAreRefused) {
  const ImageOptions o;
  EXPECT_HAS(refusal([&] { load_image_part({"https://example.com/cat.png", "p"}, o); }),
             "does not fetch images over the network");
  EXPECT_HAS(refusal([&] { load_image_part({"HTTP://example.com/cat.png", "p"}, o); }), "remote URL");
  EXPECT_HAS(refusal([&] { load_image_part({"ftp://example.com/cat.png", "p"}, o); }), "scheme 'ftp'");
  // Without --image-dir no file is read, whatever the path.
  for (const std::string& u : {vl_image("rgb_37x53.png"), "file://" + vl_image("rgb_37x53.png"), std::string("x.png")})
    EXPECT_HAS(refusal([&] { load_image_part({u, "p"}, o); }), "only when started with --image-dir");
}

TEST(ServerImages, FilesOnlyUnderTheImageDir) {
  const test::TempDir root("lfm_image_dir");
  fs::create_directories(root / "imgs" / "sub");
  fs::copy_file(vl_image("rgb_37x53.png"), root / "imgs" / "a.png");
  fs::copy_file(vl_image("tiny_5x5.png"), root / "imgs" / "sub" / "b c.png");
  fs::copy_file(vl_image("wide_200x100.png"), root / "outside.png");
  fs::create_symlink(root / "outside.png", root / "imgs" / "link_out.png");
  fs::create_symlink(root / "imgs" / "a.png", root / "imgs" / "link_in.png");
  fs::create_symlink(root.path(), root / "imgs" / "up");
  ImageOptions o;
  o.image_dir = (root / "imgs").string();
  auto width = [&](const std::string& u) { return load_image_part({u, "p"}, o).width; };
  EXPECT_EQ(width("a.png"), 37);
  EXPECT_EQ(width((root / "imgs" / "a.png").string()), 37);
  EXPECT_EQ(width("file://" + (root / "imgs" / "a.png").string()), 37);
  EXPECT_EQ(width("file://localhost" + (root / "imgs" / "a.png").string()), 37);
  EXPECT_EQ(width("file://" + (root / "imgs" / "sub" / "b%20c.png").string()), 5);
  EXPECT_EQ(width("sub/../a.png"), 37);
  EXPECT_EQ(width("link_in.png"), 37);  // a symlink that stays inside
  for (const std::string& u :
       {std::string("../outside.png"), (root / "outside.png").string(), "file://" + (root / "outside.png").string(),
        std::string("link_out.png"), std::string("up/outside.png"), std::string("sub/../../outside.png"),
        std::string("missing.png"), std::string("sub"), std::string("/etc/passwd"), std::string(".")})
    EXPECT_HAS(refusal([&] { width(u); }), "which is not an image file under this server's --image-dir");
  EXPECT_HAS(refusal([&] { width("file:relative.png"); }), "absolute path");
  EXPECT_HAS(refusal([&] { width("file:///a%2"); }), "bad %-escape");
  o.max_image_bytes = 100;
  EXPECT_HAS(refusal([&] { width("a.png"); }), "over this server's limit of 100 bytes");
}

TEST(ServerImages, CountAndVisionChecksComeFirst) {
  ImageOptions o;
  o.max_images = 2;
  const std::vector<ImagePart> three = {{"data:,", "a"}, {"data:,", "b"}, {"data:,", "c"}};
  EXPECT_HAS(refusal([&] { load_image_parts(three, o, "no vision tower here"); }, "a"), "no vision tower here");
  EXPECT_HAS(refusal([&] { load_image_parts(three, o, ""); }, "c"), "the request has 3 images; this server takes at most 2");
  EXPECT_TRUE(load_image_parts({}, o, "no vision tower here").images.empty());
}

TEST(ServerImages, ImagePartsBecomeTemplateParts) {
  const json body = json::parse(R"({"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "image_url", "image_url": {"url": "data:A", "detail": "low"}},
                                 {"type": "text", "text": "and "}, {"type": "image", "url": "data:B"}, {"type": "image_url", "image_url": "data:C"}]},
    {"role": "assistant", "content": "Two cats."},
    {"role": "user", "content": [{"type": "image", "image": "data:D"}, {"type": "text", "text": "This?"}]}]})");
  const ChatParams c = parse_chat_request(body, 1000);
  ASSERT_EQ(c.images.size(), 4u);
  EXPECT_EQ(c.images[0].url, "data:A");
  EXPECT_EQ(c.images[0].param, "messages[1].content[1].image_url");
  EXPECT_EQ(c.images[1].param, "messages[1].content[3].url");
  EXPECT_EQ(c.images[2].url, "data:C");
  EXPECT_EQ(c.images[3].param, "messages[3].content[0].image");
  EXPECT_EQ(c.messages[0]["content"], "Be brief.");
  EXPECT_EQ(c.messages[1]["content"].dump(),
            R"([{"type":"text","text":"Look: "},{"type":"image"},{"type":"text","text":"and "},{"type":"image"},{"type":"image"}])");
  EXPECT_EQ(c.messages[2]["content"], "Two cats.");
  EXPECT_EQ(c.messages[3]["content"].dump(), R"([{"type":"image"},{"type":"text","text":"This?"}])");
  // Text parts alone are still joined into one string.
  const json text = json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  EXPECT_EQ(parse_chat_request(text, 1000).messages[0]["content"], "ab");

  auto bad = [](const std::string& content, const std::string& role = "user") {
    return json::parse(R"({"messages": [{"role": ")" + role + R"(", "content": )" + content + "}]}");
  };
  EXPECT_HAS(refusal([&] { parse_chat_request(bad(R"([{"type": "image_url"}])"), 1000); }, "messages[0].content[0].image_url"),
             "must be an object {\"url\"");
  EXPECT_HAS(refusal([&] { parse_chat_request(bad(R"([{"type": "image_url", "image_url": {"uri": "x"}}])"), 1000); },
                     "messages[0].content[0].image_url.url"),
             "must be a string");
  EXPECT_HAS(refusal([&] { parse_chat_request(bad(R"([{"type": "image_url", "image_url": 5}])"), 1000); },
                     "messages[0].content[0].image_url"),
             "must be an object");
  EXPECT_HAS(refusal([&] { parse_chat_request(bad(R"([{"type": "input_audio", "input_audio": {}}])"), 1000); },
                     "messages[0].content[0].input_audio.data"),
             "must be a string (base64 audio bytes)");
  EXPECT_HAS(refusal([&] { parse_chat_request(bad(R"([{"type": "video_url", "video_url": {}}])"), 1000); },
                     "messages[0].content[0].type"),
             "'video_url' is not supported (text, image_url, input_audio)");
  EXPECT_HAS(refusal([&] { parse_chat_request(bad(R"([{"type": "image_url", "image_url": {"url": "data:A"}}])", "assistant"), 1000); },
                     "messages[0].content[0]"),
             "user messages only");
}

}  // namespace
}  // namespace lfm::server
