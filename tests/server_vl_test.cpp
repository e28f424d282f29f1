// `lfm serve` with images (LFM2-VL) over loopback HTTP, on the tiny transformers-made checkpoint
// of tests/data/hf_vl: a chat turn with an image_url data URI gives transformers' greedy tokens
// (reference.json `one_image`, whose template_text our template renders for [image, text]) and
// `lfm generate --image`'s; a later turn repeating the image is a prefix-cache hit with a cold
// server's output; every bad image is a 400 naming its part, and the server goes on serving.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "server_test_util.h"
#include "test_util.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::post;
using test::ServerProc;

std::string b64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string vl_fixture() { return test::data_dir() + "/hf_vl/lfm2vl_a_tied_ln"; }
std::string vl_image(const std::string& name) { return test::data_dir() + "/hf_vl/images/" + name; }
std::string data_uri(const std::string& file, const std::string& type = "image/png") {
  return "data:" + type + ";base64," + b64(test::read_file(vl_image(file)));
}
json image_part(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }
json text_part(const std::string& text) { return {{"type", "text"}, {"text", text}}; }

// A PNG whose header says 40000 x 1 (CRCs right): the decoder refuses it from the header.
std::string huge_png() {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  auto crc32 = [](const std::string& s) {
    uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : s) {
      c ^= b;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
  };
  const std::string ihdr = "IHDR" + be32(40000) + be32(1) + std::string("\x08\x02\x00\x00\x00", 5);
  const std::string idat = "IDAT" + std::string("\x78\x9c\x03\x00\x00\x00\x00\x01", 8);
  return std::string("\x89PNG\r\n\x1a\n", 8) + be32(13) + ihdr + be32(crc32(ihdr)) + be32(8) + idat + be32(crc32(idat)) +
         be32(0) + "IEND" + be32(crc32("IEND"));
}

class ServerVlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dirs_ = new test::TempDir("lfm_serve_vl");
    fs::create_directories(*dirs_ / "images");
    fs::copy_file(vl_image("rgb_37x53.png"), *dirs_ / "images" / "rgb.png");
    fs::create_symlink(vl_image("tiny_5x5.png"), *dirs_ / "images" / "escape.png");
    vl_ = new ServerProc(vl_fixture(), {"--parallel", "2", "--ctx-size", "512", "--kv-block-size", "4", "--max-images",
                                        "2", "--max-image-bytes", "50000", "--image-dir", (*dirs_ / "images").string()});
    text_model_ = (*dirs_ / "text").string();
    test::write_text_model(text_model_);
    text_ = new ServerProc(text_model_, {"--parallel", "1", "--ctx-size", "256"});
    const json ref = test::read_json(vl_fixture() + "/reference.json");
    for (const json& c : ref["cases"])
      if (c["name"] == "one_image") one_image_ = new json(c);
    tok_ = load_tokenizer(vl_fixture()).release();
  }
  static void TearDownTestSuite() {
    delete vl_;
    delete text_;
    delete dirs_;
    delete one_image_;
    delete tok_;
  }
  // The reference's conversation: the image, then "Describe this.".
  static json first_turn(const std::string& url) {
    return json::array({{{"role", "user"}, {"content", json::array({image_part(url), text_part("Describe this.")})}}});
  }
  static json greedy(json messages) {
    return {{"messages", std::move(messages)}, {"temperature", 0}, {"max_tokens", 12}, {"ignore_eos", true}, {"logprobs", true}};
  }
  // Each generated token's bytes (logprobs), and the same for the reference's greedy ids.
  static std::vector<std::string> token_bytes(const json& response) {
    std::vector<std::string> out;
    for (const json& e : response["choices"][0]["logprobs"]["content"]) {
      std::string b;
      for (int x : e["bytes"]) b += static_cast<char>(x);
      out.push_back(b);
    }
    return out;
  }
  static std::vector<std::string> bytes_of(const std::vector<int32_t>& ids) {
    std::vector<std::string> out;
    for (int32_t id : ids) {
      std::string b;
      tok_->append_token_bytes(id, b);
      out.push_back(b);
    }
    return out;
  }
  static test::TempDir* dirs_;
  static ServerProc *vl_, *text_;
  static std::string text_model_;
  static json* one_image_;
  static Tokenizer* tok_;
};
test::TempDir* ServerVlTest::dirs_ = nullptr;
ServerProc *ServerVlTest::vl_ = nullptr, *ServerVlTest::text_ = nullptr;
std::string ServerVlTest::text_model_;
json* ServerVlTest::one_image_ = nullptr;
Tokenizer* ServerVlTest::tok_ = nullptr;

TEST_F(ServerVlTest, ImageChatGivesTransformersAndGenerateTokens) {
  const auto ref_ids = (*one_image_)["greedy_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ref_ids.size(), 12u);
  auto c = vl_->client();
  int status = 0;
  const json r = post(c, "/v1/chat/completions", greedy(first_turn(data_uri("rgb_37x53.png"))), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens"], (*one_image_)["n_tokens"]) << r.dump();  // the image laid out as transformers does
  EXPECT_EQ(r["usage"]["completion_tokens"], 12);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(token_bytes(r), bytes_of(ref_ids)) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], tok_->decode(ref_ids, /*skip_special=*/true));

  // lfm generate --image on the reference's template text gives the same ids.
  const auto g = test::run_lfm("generate -m " + vl_fixture() + " --image " + vl_image("rgb_37x53.png") + " -p '" +
                                   (*one_image_)["template_text"].get<std::string>() +
                                   "' --no-special --ignore-eos -n 12 --temperature 0 --json -t 2",
                               test::Stderr::kDiscard);
  ASSERT_EQ(g.code, 0) << g.out;
  const json gj = json::parse(g.out);
  EXPECT_EQ(gj["prompt_ids"], (*one_image_)["input_ids"]);
  EXPECT_EQ(gj["generated_ids"].get<std::vector<int32_t>>(), ref_ids);

  // The same image as a file under --image-dir (a relative path, and a file:// URL), streamed,
  // and the part written {"type": "image", "url": …}: the same tokens.
  for (const std::string& url : {std::string("rgb.png"), "file://" + (*dirs_ / "images" / "rgb.png").string()}) {
    const json f = post(c, "/v1/chat/completions", greedy(first_turn(url)), &status);
    ASSERT_EQ(status, 200) << f.dump();
    EXPECT_EQ(token_bytes(f), bytes_of(ref_ids)) << url;
  }
  json hf = greedy(json::array({{{"role", "user"},
                                 {"content", json::array({{{"type", "image"}, {"url", data_uri("rgb_37x53.png")}},
                                                          text_part("Describe this.")})}}}));
  hf["stream"] = true;
  auto sr = c.Post("/v1/chat/completions", hf.dump(), "application/json");
  ASSERT_TRUE(sr);
  ASSERT_EQ(sr->status, 200) << sr->body;
  std::string streamed;
  for (const std::string& ev : test::sse_events(sr->body)) {
    if (ev == "[DONE]") continue;
    const json ch = json::parse(ev);
    if (!ch["choices"].empty()) streamed += ch["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(streamed, r["choices"][0]["message"]["content"].get<std::string>());
}

// A later turn that repeats the first (same image) resumes from the prefix cache past the image's
// tokens, and answers as a server that never saw it.
TEST_F(ServerVlTest, RepeatedImageIsAPrefixCacheHitWithTheColdOutput) {
  auto c = vl_->client();
  int status = 0;
  const std::string url = data_uri("rgb_37x53.png");
  const json first = post(c, "/v1/chat/completions", greedy(first_turn(url)), &status);
  ASSERT_EQ(status, 200) << first.dump();
  json msgs = first_turn(url);
  msgs.push_back({{"role", "assistant"}, {"content", "A small picture."}});
  msgs.push_back({{"role", "user"}, {"content", "What colour is it?"}});
  const json warm = post(c, "/v1/chat/completions", greedy(msgs), &status);
  ASSERT_EQ(status, 200) << warm.dump();
  // Past the image's last token (position 13 of the reference's ids).
  EXPECT_GT(warm["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 13) << warm.dump();

  ServerProc cold(vl_fixture(), {"--parallel", "1", "--ctx-size", "512", "--kv-block-size", "4"});
  auto cc = cold.client();
  const json fresh = post(cc, "/v1/chat/completions", greedy(msgs), &status);
  ASSERT_EQ(status, 200) << fresh.dump();
  EXPECT_EQ(fresh["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(fresh["usage"]["prompt_tokens"], warm["usage"]["prompt_tokens"]);
  EXPECT_EQ(token_bytes(fresh), token_bytes(warm));
  EXPECT_EQ(fresh["choices"][0]["message"]["content"], warm["choices"][0]["message"]["content"]);
}

TEST_F(ServerVlTest, BadImagesAre400sAndTheServerKeepsServing) {
  auto c = vl_->client();
  auto expect_400 = [&](ServerProc& s, const std::string& path, const json& body, const std::string& param,
                        const std::string& needle) {
    auto cl = s.client();
    int status = 0;
    const json r = post(cl, path, body, &status);
    EXPECT_EQ(status, 400) << needle << ": " << r.dump().substr(0, 400);
    ASSERT_TRUE(r.contains("error")) << r.dump().substr(0, 400);
    EXPECT_EQ(r["error"]["type"], "invalid_request_error");
    EXPECT_EQ(r["error"]["param"], param) << r.dump().substr(0, 400);
    EXPECT_NE(r["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.dump().substr(0, 400);
  };
  auto one = [](json parts) {
    return json{{"messages", json::array({{{"role", "user"}, {"content", std::move(parts)}}})}, {"max_tokens", 2}};
  };
  const std::string p0 = "messages[0].content[0].image_url";
  const std::string png = test::read_file(vl_image("rgb_37x53.png"));
  expect_400(*vl_, "/v1/chat/completions", one({image_part("data:image/png;base64,iVBORw0KGgo*AAA")}), p0, "invalid base64");
  expect_400(*vl_, "/v1/chat/completions", one({image_part("data:image/png;base64," + b64("GIF89a, not a PNG"))}), p0,
             "unknown format");
  expect_400(*vl_, "/v1/chat/completions", one({image_part("data:image/png;base64," + b64(png.substr(0, 300)))}), p0,
             "is not an image this server can use: image:");
  expect_400(*vl_, "/v1/chat/completions", one({image_part("data:image/png;base64," + b64(huge_png()))}), p0,
             "40000");
  expect_400(*vl_, "/v1/chat/completions",
             one({image_part(data_uri("rgb_37x53.png")), image_part(data_uri("tiny_5x5.png")),
                  image_part(data_uri("line_1x61.png"))}),
             "messages[0].content[2].image_url", "the request has 3 images; this server takes at most 2");
  expect_400(*vl_, "/v1/chat/completions", one({image_part(data_uri("large_1100x620.jpg", "image/jpeg"))}), p0,
             "over this server's limit of 50000 bytes");
  expect_400(*vl_, "/v1/chat/completions", one({image_part("https://example.com/cat.png")}), p0,
             "does not fetch images over the network");
  expect_400(*vl_, "/v1/chat/completions", one({image_part("data:text/plain;base64," + b64("hello"))}), p0,
             "not an image");
  for (const std::string& outside : {std::string("../text/config.json"), vl_image("tiny_5x5.png"),
                                     "file://" + vl_image("tiny_5x5.png"), std::string("escape.png")})
    expect_400(*vl_, "/v1/chat/completions", one({image_part(outside)}), p0, "is not an image file under this server's --image-dir");
  // A placeholder typed in the text: two placeholders for one image.
  expect_400(*vl_, "/v1/chat/completions", one({image_part(data_uri("rgb_37x53.png")), text_part("And <image>?")}),
             "messages", "2 image placeholders (<image>) for 1 images");
  expect_400(*vl_, "/v1/chat/completions", one({text_part("Only <image> text")}), "messages", "1 image placeholders");
  expect_400(*vl_, "/v1/completions", json{{"prompt", "<image> hi"}, {"max_tokens", 2}}, "prompt",
             "/v1/completions takes no images");
  expect_400(*text_, "/v1/chat/completions", one({image_part(data_uri("rgb_37x53.png")), text_part("Hi")}), p0,
             "no vision tower");

  // Still serving, with the same answer as before.
  int status = 0;
  const json r = post(c, "/v1/chat/completions", greedy(first_turn(data_uri("rgb_37x53.png"))), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(token_bytes(r), bytes_of((*one_image_)["greedy_ids"].get<std::vector<int32_t>>()));
  auto h = text_->client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

}  // namespace
}  // namespace lfm
