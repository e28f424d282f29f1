// Hub references, file selection, digests and settings: the pure parts of src/hub/.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

#include "hub/cache_layout.h"
#include "hub/digest.h"
#include "hub/file_select.h"
#include "hub/hub_error.h"
#include "hub/http_client.h"
#include "hub/model_ref.h"
#include "hub/settings.h"
#include "test_util.h"

namespace lfm::hub {
namespace {

ModelRef must_parse(const std::string& s) {
  std::string why;
  const auto r = parse_model_ref(s, &why);
  EXPECT_TRUE(r.has_value()) << s << ": " << why;
  return r.value_or(ModelRef{});
}

TEST(HubRef, ParsesEveryForm) {
  auto r = must_parse("LiquidAI/LFM2-1.2B");
  EXPECT_EQ(r.repo, "LiquidAI/LFM2-1.2B");
  EXPECT_EQ(r.revision, "main");
  EXPECT_FALSE(r.revision_given);
  EXPECT_TRUE(r.file.empty() && r.quant.empty());

  r = must_parse("LiquidAI/LFM2-1.2B-GGUF:Q4_K_M");
  EXPECT_EQ(r.repo, "LiquidAI/LFM2-1.2B-GGUF");
  EXPECT_EQ(r.quant, "Q4_K_M");

  r = must_parse("LiquidAI/LFM2-1.2B-GGUF/sub/LFM2-1.2B-Q8_0.gguf@v1.0");
  EXPECT_EQ(r.file, "sub/LFM2-1.2B-Q8_0.gguf");
  EXPECT_EQ(r.revision, "v1.0");
  EXPECT_TRUE(r.revision_given);

  // ':' and '@' in either order; revisions may hold '/' (refs/pr/1).
  for (const char* s : {"a/b:q8_0@refs/pr/1", "a/b@refs/pr/1:q8_0"}) {
    r = must_parse(s);
    EXPECT_EQ(r.quant, "q8_0") << s;
    EXPECT_EQ(r.revision, "refs/pr/1") << s;
  }
  EXPECT_EQ(must_parse("a/b:Q4_0@main").str(), "a/b:Q4_0@main");
  EXPECT_EQ(must_parse("a/b/c.gguf").str(), "a/b/c.gguf");
}

TEST(HubRef, RejectsPathsAndMalformedReferences) {
  for (const char* s : {"/abs/model", "./rel/model", "../up/model", "~/model", "model", "model.gguf", "a/b/c",
                        "a/b/c.safetensors", "a--x/b", "a/b..c", "-a/b", "a/b-", "a/b:", "a/b@", "a/b:Q4:Q5",
                        "a/b@x@y:", "a/b/../c.gguf", "a/b/c.gguf:Q4_0", "a/b@../../etc", "a b/c", ""}) {
    std::string why;
    EXPECT_FALSE(parse_model_ref(s, &why).has_value()) << s;
    EXPECT_FALSE(why.empty()) << s;
  }
}

TEST(HubRef, CommitHashes) {
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("main"));
  EXPECT_FALSE(is_commit_hash("0123456"));
}

TEST(HubRef, CacheFolderNamesAndEtags) {
  EXPECT_EQ(repo_folder_name("LiquidAI/LFM2-1.2B"), "models--LiquidAI--LFM2-1.2B");
  EXPECT_EQ(repo_from_folder_name("models--LiquidAI--LFM2-1.2B").value_or(""), "LiquidAI/LFM2-1.2B");
  EXPECT_FALSE(repo_from_folder_name("datasets--a--b").has_value());
  EXPECT_EQ(normalize_etag("\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("W/\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("abc"), "abc");
  EXPECT_TRUE(safe_blob_name("a1b2c3"));
  for (const char* bad : {"", "..", "a/b", "a\\b", "x y"}) EXPECT_FALSE(safe_blob_name(bad)) << bad;
  EXPECT_TRUE(safe_relative_path("onnx/model.onnx"));
  for (const char* bad : {"", "/etc/passwd", "a/../b", "a//b", "a/", "..", "a\\b"}) EXPECT_FALSE(safe_relative_path(bad)) << bad;
}

TEST(HubDigest, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // `printf 'hello\n' | git hash-object --stdin`
  EXPECT_EQ(git_blob_sha1("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
  EXPECT_EQ(git_blob_sha1(""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  // Incremental updates and files agree with the one-shot digest.
  const std::string big(3 << 20, 'x');
  Digest d(Digest::Algo::kSha256);
  d.update(big.data(), 1000);
  d.update(big.data() + 1000, big.size() - 1000);
  const std::string whole = sha256_hex(big);
  EXPECT_EQ(d.hex(), whole);
  const test::TempDir dir("lfm_hub_digest");
  const std::string path = dir.write("f", big);
  EXPECT_EQ(sha256_file(path), whole);
  EXPECT_EQ(sha256_file(path, 3), sha256_hex("xxx"));
  EXPECT_EQ(git_blob_sha1_file(dir.write("g", "hello\n")), "ce013625030ba8dba906f756967f9e9ca394464a");
  EXPECT_EQ(etag_kind(whole), EtagKind::kSha256);
  EXPECT_EQ(etag_kind("ce013625030ba8dba906f756967f9e9ca394464a"), EtagKind::kGitSha1);
  EXPECT_EQ(etag_kind("some-mirror-etag"), EtagKind::kOpaque);
}

TEST(HubRef, UrlEncoding) {
  EXPECT_EQ(url_encode("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(url_encode("sub dir/a+b.gguf", true), "sub%20dir/a%2Bb.gguf");
}

// ---- file selection ------------------------------------------------------------------------------

const std::vector<std::string> kSafetensorsRepo = {
    ".gitattributes", "README.md", "config.json", "generation_config.json", "model.safetensors",
    "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
    "onnx/model.onnx", "pytorch_model.bin"};

TEST(HubSelect, SafetensorsRepoFetchesOnlyWhatTheLoaderReads) {
  const auto sel = select_files(kSafetensorsRepo, must_parse("a/b"), Need::kModel);
  EXPECT_FALSE(sel.gguf);
  EXPECT_EQ(sel.files, (std::vector<std::string>{"config.json", "generation_config.json", "tokenizer.json",
                                                 "tokenizer_config.json", "special_tokens_map.json",
                                                 "chat_template.jinja", "model.safetensors"}));
  EXPECT_TRUE(sel.sharded_index.empty());
  EXPECT_EQ(select_files(kSafetensorsRepo, must_parse("a/b"), Need::kConfig).files,
            (std::vector<std::string>{"config.json", "generation_config.json"}));
  EXPECT_EQ(select_files(kSafetensorsRepo, must_parse("a/b"), Need::kTokenizer).files,
            (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                      "chat_template.jinja"}));
}

TEST(HubSelect, ShardedCheckpointUsesItsIndex) {
  const auto sel = select_files({"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                 "model-00002-of-00002.safetensors"},
                                must_parse("a/b"), Need::kModel);
  EXPECT_EQ(sel.files, (std::vector<std::string>{"config.json", "model.safetensors.index.json"}));
  EXPECT_EQ(sel.sharded_index, "model.safetensors.index.json");
  const auto shards = index_shards(
      R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})",
      "index");
  EXPECT_EQ(shards, (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  EXPECT_THROW(index_shards(R"({"weight_map": {"a": "../x.safetensors"}})", "index"), Error);
  EXPECT_THROW(index_shards("not json", "index"), Error);
}

const std::vector<std::string> kGgufRepo = {"README.md", "LFM2-1.2B-Q4_0.gguf", "LFM2-1.2B-Q4_K_M.gguf",
                                            "LFM2-1.2B-Q8_0.gguf", "LFM2-1.2B-F16.gguf",
                                            "mmproj-LFM2-1.2B-F16.gguf"};

std::string error_of(const std::vector<std::string>& listing, const std::string& ref, Need need = Need::kModel) {
  try {
    select_files(listing, must_parse(ref), need);
  } catch (const HubError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    return e.what();
  }
  return "";
}

TEST(HubSelect, GgufByQuantTagOrFileName) {
  EXPECT_EQ(select_files(kGgufRepo, must_parse("a/b:Q8_0"), Need::kModel).files,
            std::vector<std::string>{"LFM2-1.2B-Q8_0.gguf"});
  EXPECT_EQ(select_files(kGgufRepo, must_parse("a/b:q4_k_m"), Need::kModel).files,  // any case
            std::vector<std::string>{"LFM2-1.2B-Q4_K_M.gguf"});
  // No tag: Q4_K_M, whatever the command needs (a GGUF holds config and tokenizer too).
  for (Need n : {Need::kModel, Need::kConfig, Need::kTokenizer}) {
    const auto sel = select_files(kGgufRepo, must_parse("a/b"), n);
    EXPECT_TRUE(sel.gguf);
    EXPECT_EQ(sel.files, std::vector<std::string>{"LFM2-1.2B-Q4_K_M.gguf"});
  }
  EXPECT_EQ(select_files(kGgufRepo, must_parse("a/b/LFM2-1.2B-F16.gguf"), Need::kModel).files,
            std::vector<std::string>{"LFM2-1.2B-F16.gguf"});
  // A lone GGUF is the choice whatever its tag.
  EXPECT_EQ(select_files({"x-Q6_K.gguf"}, must_parse("a/b"), Need::kModel).files, std::vector<std::string>{"x-Q6_K.gguf"});
  // Safetensors win over GGUFs unless a quant is named.
  std::vector<std::string> both = kSafetensorsRepo;
  both.push_back("model-Q8_0.gguf");
  EXPECT_FALSE(select_files(both, must_parse("a/b"), Need::kModel).gguf);
  EXPECT_TRUE(select_files(both, must_parse("a/b:Q8_0"), Need::kModel).gguf);
}

TEST(HubSelect, GgufChoiceErrorsListTheQuants) {
  std::string e = error_of(kGgufRepo, "a/b:Q5_K_M");
  EXPECT_NE(e.find("no GGUF file for quant 'Q5_K_M'"), std::string::npos) << e;
  for (const char* q : {"Q4_0", "Q4_K_M", "Q8_0", "F16"}) EXPECT_NE(e.find(q), std::string::npos) << e;
  EXPECT_EQ(e.find("mmproj"), std::string::npos) << e;
  e = error_of({"m-Q4_K_S.gguf", "m-Q4_K_L.gguf"}, "a/b:Q4_K");  // a prefix of two tags
  EXPECT_NE(e.find("matches several files"), std::string::npos) << e;
  e = error_of({"m-Q8_0.gguf", "m-F16.gguf"}, "a/b");
  EXPECT_NE(e.find("no Q4_K_M"), std::string::npos) << e;
  EXPECT_NE(e.find("a/b:QUANT"), std::string::npos) << e;
  e = error_of(kGgufRepo, "a/b/LFM2-1.2B-Q2_K.gguf");
  EXPECT_NE(e.find("has no file 'LFM2-1.2B-Q2_K.gguf'"), std::string::npos) << e;
  e = error_of(kGgufRepo, "a/b/mmproj-LFM2-1.2B-F16.gguf");
  EXPECT_NE(e.find("vision projector"), std::string::npos) << e;
  e = error_of(kSafetensorsRepo, "a/b:Q4_K_M");
  EXPECT_NE(e.find("has no GGUF files"), std::string::npos) << e;
  EXPECT_NE(e.find("drop the :QUANT"), std::string::npos) << e;
}

TEST(HubSelect, SplitGgufIsRejectedClearly) {
  const std::vector<std::string> repo = {"m-Q4_K_M.gguf", "m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"};
  EXPECT_TRUE(is_split_gguf("m-Q8_0-00001-of-00002.gguf"));
  EXPECT_FALSE(is_split_gguf("m-Q8_0.gguf"));
  EXPECT_EQ(gguf_quant_tag("m-Q8_0-00001-of-00002.gguf"), "Q8_0");
  EXPECT_EQ(gguf_quant_tag("dir/LFM2-1.2B-Q4_K_M.gguf"), "Q4_K_M");
  EXPECT_EQ(gguf_quant_tag("model.q8_0.gguf"), "q8_0");
  const std::string e = error_of(repo, "a/b:Q8_0");
  EXPECT_NE(e.find("split GGUF"), std::string::npos) << e;
  EXPECT_NE(e.find("llama-gguf-split --merge"), std::string::npos) << e;
  EXPECT_NE(e.find("Q8_0 (split, not supported)"), std::string::npos) << e;
  EXPECT_EQ(select_files(repo, must_parse("a/b"), Need::kModel).files, std::vector<std::string>{"m-Q4_K_M.gguf"});
}

TEST(HubSelect, RepositoriesWithoutLoadableWeights) {
  std::string e = error_of({"README.md", "pytorch_model.bin", "config.json"}, "a/b");
  EXPECT_NE(e.find("not PyTorch .bin"), std::string::npos) << e;
  e = error_of({"README.md"}, "a/b");
  EXPECT_NE(e.find("neither config.json nor GGUF"), std::string::npos) << e;
  e = error_of({"config.json", "model.safetensors"}, "a/b", Need::kTokenizer);
  EXPECT_NE(e.find("no tokenizer.json"), std::string::npos) << e;
  // A config-only repository is enough for `lfm info`.
  EXPECT_EQ(select_files({"config.json"}, must_parse("a/b"), Need::kConfig).files, std::vector<std::string>{"config.json"});
}

// ---- settings from the environment ---------------------------------------------------------------

// Sets variables for one test and puts the old values back.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(HubSettings, FollowHuggingfaceHubVariables) {
  ScopedEnv env;
  const test::TempDir home("lfm_hub_home");
  for (const char* v : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_ENDPOINT", "HF_TOKEN",
                        "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "HF_HUB_ETAG_TIMEOUT",
                        "HF_HUB_DOWNLOAD_TIMEOUT"})
    env.set(v, nullptr);
  env.set("HOME", home.str().c_str());
  Settings s = settings_from_env();
  EXPECT_EQ(s.cache_dir, home.path() / ".cache/huggingface/hub");
  EXPECT_EQ(s.endpoint, "https://huggingface.co");
  EXPECT_TRUE(s.token.empty());
  EXPECT_FALSE(s.offline);

  env.set("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(settings_from_env().cache_dir, "/xdg/huggingface/hub");
  env.set("HF_HOME", "~/hfhome");
  EXPECT_EQ(settings_from_env().cache_dir, home.path() / "hfhome/hub");
  // The token file `hf auth login` writes under HF_HOME.
  std::filesystem::create_directories(home.path() / "hfhome");
  home.write("hfhome/token", "hf_fromfile\n");
  EXPECT_EQ(settings_from_env().token, "hf_fromfile");
  env.set("HF_TOKEN", "hf_fromenv");
  EXPECT_EQ(settings_from_env().token, "hf_fromenv");
  env.set("HF_HUB_CACHE", "/explicit/cache");
  env.set("HF_ENDPOINT", "http://127.0.0.1:9/");
  env.set("HF_HUB_OFFLINE", "1");
  env.set("HF_HUB_DOWNLOAD_TIMEOUT", "3");
  s = settings_from_env();
  EXPECT_EQ(s.cache_dir, "/explicit/cache");
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:9");
  EXPECT_TRUE(s.offline);
  EXPECT_EQ(s.stall_timeout_s, 3);
  for (const char* v : {"ON", "yes", "True"}) {
    env.set("HF_HUB_OFFLINE", v);
    EXPECT_TRUE(settings_from_env().offline) << v;
  }
  env.set("HF_HUB_OFFLINE", "0");
  EXPECT_FALSE(settings_from_env().offline);
}

}  // namespace
}  // namespace lfm::hub
