// Images through the C API (LFM2-VL, tests/data/hf_vl): files and in-memory bytes with ids, text
// and chat prompts (image parts, data URIs) give the greedy tokens the engine gives, which are
// transformers' (reference.json; tests/vision_cli_test.cpp and server_vl_test.cpp check the engine
// and the server against the same cases); and the refusals: a model without a vision tower, an
// unreadable or undecodable image, placeholders that do not match the images.
#include <gtest/gtest.h>
#include <lfm/lfm.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capi_test_util.h"

namespace {

using namespace lfm_capi_test;
using json = nlohmann::json;

const std::string kVl = kData + "/hf_vl/lfm2vl_a_tied_ln";
const std::string kImages = kData + "/hf_vl/images/";

const json& vl_case(const std::string& name) {
  static const json ref = [] {
    std::ifstream f(kVl + "/reference.json");
    return json::parse(f);
  }();
  for (const auto& c : ref["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no case " + name);
}

// The case's ids with each image's layout (<|image_start|> ... <|image_end|>) folded back into one
// image token (396): what a caller passes.
std::vector<int32_t> folded_ids(const json& ids) {
  std::vector<int32_t> out;
  bool inside = false;
  for (const auto& v : ids) {
    const int32_t id = v.get<int32_t>();
    if (id == 498) {
      inside = true;
      out.push_back(396);
    }
    if (!inside) out.push_back(id);
    if (id == 499) inside = false;
  }
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string base64(const std::string& in) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {a[v >> 18], a[(v >> 12) & 63], a[(v >> 6) & 63], a[v & 63]};
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += {a[v >> 18], a[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {a[v >> 18], a[(v >> 12) & 63], a[(v >> 6) & 63], '='};
  }
  return out;
}

// A prompt's images, each a path or bytes in memory.
struct Images {
  std::vector<std::pair<bool, std::string>> items;  // (a path?, the path or the bytes)
  std::vector<const char*> paths;
  std::vector<const void*> data;
  std::vector<size_t> sizes;
  void add_path(std::string p) { items.emplace_back(true, std::move(p)); }
  void add_bytes(std::string b) { items.emplace_back(false, std::move(b)); }
  void attach(lfm_prompt& p) {
    paths.clear();
    data.clear();
    sizes.clear();
    for (const auto& [is_path, s] : items) {
      paths.push_back(is_path ? s.c_str() : nullptr);
      data.push_back(is_path ? nullptr : s.data());
      sizes.push_back(is_path ? 0 : s.size());
    }
    p.n_images = items.size();
    p.image_paths = paths.data();
    p.image_data = data.data();
    p.image_sizes = sizes.data();
  }
};

TEST(CApiImages, IdsTextAndChatPromptsGiveTheReferenceTokens) {
  Model model(kVl);
  lfm_model_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(lfm_model_get_info(model.m, &info), LFM_OK);
  EXPECT_EQ(info.has_vision, 1);
  EXPECT_EQ(info.image_token, 396);
  Engine eng(model.m);
  const json& one = vl_case("one_image");
  const auto expected = one["greedy_ids"].get<std::vector<int32_t>>();
  const lfm_sampling_params sp = greedy_params(static_cast<int64_t>(expected.size()));

  // Ids with the image token once, the image as a file and as bytes in memory.
  const std::vector<int32_t> ids = folded_ids(one["input_ids"]);
  for (int in_memory = 0; in_memory < 2; ++in_memory) {
    lfm_prompt p = ids_prompt(ids);
    Images im;
    if (in_memory) {
      im.add_bytes(file_bytes(kImages + "rgb_37x53.png"));
    } else {
      im.add_path(kImages + "rgb_37x53.png");
    }
    im.attach(p);
    const Outcome o = run(eng.e, p, &sp);
    ASSERT_EQ(o.status, LFM_OK) << o.error;
    EXPECT_EQ(o.tokens, expected) << "in memory: " << in_memory;
    EXPECT_EQ(o.done.prompt_tokens, one["n_tokens"].get<int64_t>());  // laid out as transformers does
  }

  // Chat: an image part taking the prompt's image, and an OpenAI image_url part with a data URI.
  const std::string uri = "data:image/png;base64," + base64(file_bytes(kImages + "rgb_37x53.png"));
  const std::string bare = R"([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this."}]}])";
  const std::string openai = json::array({{{"role", "user"},
                                           {"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", uri}}}},
                                                                    {{"type", "text"}, {"text", "Describe this."}}})}}})
                                 .dump();
  for (const std::string* msgs : {&bare, &openai}) {
    lfm_prompt p;
    lfm_prompt_init(&p);
    p.messages_json = msgs->c_str();
    Images im;
    if (msgs == &bare) im.add_bytes(file_bytes(kImages + "rgb_37x53.png"));
    im.attach(p);
    const Outcome o = run(eng.e, p, &sp);
    ASSERT_EQ(o.status, LFM_OK) << o.error;
    EXPECT_EQ(o.tokens, expected);
    EXPECT_EQ(o.done.prompt_tokens, one["n_tokens"].get<int64_t>());
    EXPECT_FALSE(o.message.empty());
  }
  // The conversation's ids with the image token once per image (lfm_chat_tokens) are the
  // reference's folded ids.
  size_t n = 0;
  ASSERT_EQ(lfm_chat_tokens(model.m, bare.c_str(), nullptr, nullptr, 0, &n), LFM_ERR_BUFFER_TOO_SMALL);
  std::vector<int32_t> chat_ids(n);
  ASSERT_EQ(lfm_chat_tokens(model.m, openai.c_str(), nullptr, chat_ids.data(), n, &n), LFM_OK) << lfm_last_error();
  EXPECT_EQ(chat_ids, ids);

  // Two images, one a file and one in memory; text with "<image>" twice.
  const json& two = vl_case("two_images");
  lfm_prompt p;
  lfm_prompt_init(&p);
  std::string text = two["template_text"].get<std::string>();
  text = text.substr(std::string("<|startoftext|>").size());  // the tokenizer adds BOS
  p.text = text.c_str();
  Images im;
  im.add_path(kImages + "rgb_37x53.png");
  im.add_bytes(file_bytes(kImages + "exif6_160x90.jpg"));
  im.attach(p);
  const Outcome o = run(eng.e, p, &sp);
  ASSERT_EQ(o.status, LFM_OK) << o.error;
  EXPECT_EQ(o.tokens, two["greedy_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(o.done.prompt_tokens, two["n_tokens"].get<int64_t>());
  EXPECT_GT(o.done.image_tiles, 0);
}

TEST(CApiImages, ImagesThatCannotBeUsedAreRefused) {
  const lfm_sampling_params sp = greedy_params(2);
  // A model without a vision tower.
  {
    Model text_only(kFixture);
    Engine eng(text_only.m);
    const std::vector<int32_t> ids = {1, 396, 7};
    lfm_prompt p = ids_prompt(ids);
    Images im;
    im.add_path(kImages + "rgb_37x53.png");
    im.attach(p);
    const Outcome o = run(eng.e, p, &sp);
    EXPECT_EQ(o.status, LFM_ERR_UNSUPPORTED);
    EXPECT_NE(o.error.find("vision tower"), std::string::npos) << o.error;
  }
  Model model(kVl);
  Engine eng(model.m);
  auto refused = [&](lfm_prompt p, Images im, const std::string& says) {
    im.attach(p);
    const Outcome o = run(eng.e, p, &sp);
    EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT) << says;
    EXPECT_NE(o.error.find(says), std::string::npos) << o.error;
  };
  const std::vector<int32_t> one = {1, 396, 7}, none = {1, 7};
  Images missing;
  missing.add_path("/nonexistent/cat.png");
  refused(ids_prompt(one), missing, "/nonexistent/cat.png");
  Images junk;
  junk.add_bytes("\x89PNG\r\n\x1a\n not really");
  refused(ids_prompt(one), junk, "image 0 (");
  Images good;
  good.add_path(kImages + "rgb_37x53.png");
  refused(ids_prompt(none), good, "placeholders");  // no image token for the image
  Images empty_entry;
  empty_entry.add_bytes("");
  refused(ids_prompt(one), empty_entry, "image 0 (0 bytes");

  // Chat: parts without enough images, images without parts, URLs that are not data URIs, bad
  // base64, an image in an assistant message.
  lfm_prompt chat;
  lfm_prompt_init(&chat);
  const std::string bare = R"([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}])";
  chat.messages_json = bare.c_str();
  refused(chat, Images(), "without a URL");
  const std::string text_only = R"([{"role": "user", "content": "Hi"}])";
  chat.messages_json = text_only.c_str();
  refused(chat, good, "1 images");
  for (const char* url : {"https://example.com/cat.png", "/tmp/cat.png", "data:image/png;base64,!!!!",
                          "data:text/plain;base64,aGk="}) {
    const std::string msgs =
        json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", url}}}}})}}})
            .dump();
    chat.messages_json = msgs.c_str();
    refused(chat, Images(), "messages[0].content[0]");
  }
  const std::string assistant =
      R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "image"}]}])";
  chat.messages_json = assistant.c_str();
  refused(chat, good, "user messages only");
}

// Issue 55: eight decompression bombs (64 M pixels each in 7.8 KB, each within the per-image
// limits) are refused from their headers by the request's image-memory budget, before any is
// decoded: the process's peak RSS hardly moves (decoding them took 1.5 GB of RGB alone).
int64_t status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  const std::string key = std::string(field) + ":";
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  return -1;
}

TEST(CApiImages, DecompressionBombsAreRefusedByTheMemoryBudget) {
  Model model(kVl);
  Engine eng(model.m);
  const lfm_sampling_params sp = greedy_params(2);
  std::vector<int32_t> ids = {1};
  Images im;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(396);
    im.add_bytes(file_bytes(kData + "/image/files/bomb_8000x8000.png"));
  }
  ids.push_back(7);
  lfm_prompt p = ids_prompt(ids);
  im.attach(p);
  std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current RSS
  const int64_t before = status_kb("VmRSS");
  const Outcome o = run(eng.e, p, &sp);
  const int64_t peak = status_kb("VmHWM");
  EXPECT_EQ(o.status, LFM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.error.find("8000x8000"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("image memory"), std::string::npos) << o.error;
  EXPECT_LT(peak - before, 64 * 1024) << "peak grew by " << (peak - before) / 1024 << " MB";
}

}  // namespace
