// Downloads from a fake Hub on loopback (tests/fake_hub.h) into a temporary Hugging Face cache:
// only the needed files, huggingface_hub's layout, reuse, offline use, resuming, corruption, and
// the 401/403/404/network errors. Nothing here reaches the internet.
#include <gtest/gtest.h>


#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "fake_hub.h"
#include "hub/cache_layout.h"
#include "hub/digest.h"
#include "hub/hub_error.h"
#include "hub/resolve.h"
#include "model/model.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm::hub {
namespace {

namespace fs = std::filesystem;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

ModelRef make_ref(const std::string& s) {
  std::string why;
  const auto r = parse_model_ref(s, &why);
  EXPECT_TRUE(r) << why;
  return r.value_or(ModelRef{});
}

class HubDownload : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new test::TempDir("lfm_hub_model");
    test::write_text_model(model_->str());
  }
  static void TearDownTestSuite() { delete model_; }

  void SetUp() override {
    hub_.add_folder("acme/tiny", model_->path(), kCommit,
                    {{"README.md", "# tiny\n"}, {"onnx/model.onnx", std::string(20000, 'o')}, {"pytorch_model.bin", "bin"}});
    s_.endpoint = hub_.endpoint();
    s_.cache_dir = cache_.path() / "hub";
    s_.retry_delay_s = 0.01;
  }

  std::string error_of(const std::string& r, ErrorKind kind, Need need = Need::kModel) {
    try {
      resolve(make_ref(r), need, s_);
    } catch (const HubError& e) {
      EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
      return e.what();
    }
    ADD_FAILURE() << r << " resolved";
    return "";
  }

  RepoCache repo_cache(const std::string& repo = "acme/tiny") const { return RepoCache(s_.cache_dir, repo); }
  std::string file_bytes(const std::string& name) const { return test::read_file(model_->path() / name); }

  static test::TempDir* model_;
  test::FakeHub hub_;
  test::TempDir cache_{"lfm_hub_cache"};
  Settings s_;
};
test::TempDir* HubDownload::model_ = nullptr;

TEST_F(HubDownload, FetchesOnlyTheModelFilesIntoTheHuggingFaceLayout) {
  const Resolved r = resolve(make_ref("acme/tiny"), Need::kModel, s_);
  const RepoCache c = repo_cache();
  EXPECT_EQ(r.path, c.snapshot(kCommit).string());
  EXPECT_EQ(r.commit, kCommit);
  EXPECT_FALSE(r.from_cache_only);
  EXPECT_EQ(r.downloaded, static_cast<int>(r.files.size()));
  EXPECT_EQ(c.read_ref("main").value_or(""), kCommit);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "model.safetensors"}) {
    const std::string bytes = file_bytes(f);
    // LFS files are named by their sha256, the rest by their git blob sha1, as huggingface_hub names them.
    const std::string etag = test::FakeHub::is_lfs(f, bytes) ? sha256_hex(bytes) : git_blob_sha1(bytes);
    EXPECT_EQ(fs::read_symlink(c.snapshot(kCommit) / f), "../../blobs/" + etag) << f;
    EXPECT_EQ(test::read_file(c.blob(etag)), bytes) << f;
  }
  for (const char* skipped : {"README.md", "onnx/model.onnx", "pytorch_model.bin"}) {
    EXPECT_EQ(hub_.count("GET", skipped), 0) << skipped;
    EXPECT_FALSE(fs::exists(c.snapshot(kCommit) / skipped)) << skipped;
  }
  // LFS files (the weights, the large tokenizer files) went through the CDN redirect, once each.
  int lfs = 0;
  for (const auto& f : r.files) {
    if (!test::FakeHub::is_lfs(f, file_bytes(f))) continue;
    EXPECT_EQ(hub_.count("GET", "/cdn/" + sha256_hex(file_bytes(f))), 1) << f;
    ++lfs;
  }
  EXPECT_GE(lfs, 2);
  EXPECT_EQ(hub_.count("GET", "/cdn/"), lfs);
  EXPECT_TRUE(fs::is_directory(s_.cache_dir / ".locks/models--acme--tiny"));
  // What was fetched is a model lfm loads.
  EXPECT_EQ(load_model(r.path)->config().n_layers, load_model(model_->str())->config().n_layers);
}

TEST_F(HubDownload, ASecondRunReusesTheCacheAndOfflineNeedsNoNetwork) {
  resolve(make_ref("acme/tiny"), Need::kModel, s_);
  hub_.clear_requests();
  Resolved again = resolve(make_ref("acme/tiny"), Need::kModel, s_);
  EXPECT_EQ(again.downloaded, 0);
  EXPECT_EQ(hub_.requests().size(), 1u);  // the revision lookup only
  EXPECT_EQ(hub_.count("GET", "/api/models/acme/tiny/revision/main"), 1);

  hub_.clear_requests();
  s_.offline = true;
  const Resolved off = resolve(make_ref("acme/tiny"), Need::kModel, s_);
  EXPECT_TRUE(off.from_cache_only);
  EXPECT_EQ(off.path, again.path);
  EXPECT_EQ(off.files, again.files);
  EXPECT_TRUE(hub_.requests().empty());
  // By commit too, and a GGUF or a repo never fetched is a clear miss.
  EXPECT_EQ(resolve(make_ref("acme/tiny@" + kCommit), Need::kModel, s_).path, again.path);
  std::string e = error_of("acme/other", ErrorKind::kNotCached);
  EXPECT_NE(e.find("HF_HUB_OFFLINE is set and 'acme/other' is not in the cache"), std::string::npos) << e;
  EXPECT_NE(e.find("lfm pull acme/other"), std::string::npos) << e;
  e = error_of("acme/tiny@v2", ErrorKind::kNotCached);
  EXPECT_NE(e.find("'acme/tiny@v2' is not in the cache"), std::string::npos) << e;
}

TEST_F(HubDownload, PartialFetchesGrowAndOfflineKnowsWhatIsMissing) {
  // `lfm info` fetches config.json only; running the model later fetches the rest.
  const Resolved cfg = resolve(make_ref("acme/tiny"), Need::kConfig, s_);
  EXPECT_EQ(cfg.files, std::vector<std::string>{"config.json"});
  EXPECT_EQ(hub_.count("GET", "/cdn/" + sha256_hex(file_bytes("model.safetensors"))), 0);
  s_.offline = true;
  EXPECT_EQ(resolve(make_ref("acme/tiny"), Need::kConfig, s_).path, cfg.path);
  const std::string e = error_of("acme/tiny", ErrorKind::kNotCached);
  EXPECT_NE(e.find("is only partly"), std::string::npos) << e;
  s_.offline = false;
  EXPECT_GT(resolve(make_ref("acme/tiny"), Need::kModel, s_).downloaded, 0);
  s_.offline = true;
  EXPECT_NO_THROW(resolve(make_ref("acme/tiny"), Need::kModel, s_));
}

TEST_F(HubDownload, AnUnreachableHubFallsBackToTheCache) {
  s_.endpoint = "http://127.0.0.1:" + std::to_string(test::closed_port());
  std::string e = error_of("acme/tiny", ErrorKind::kNetwork);
  EXPECT_NE(e.find("cannot reach http://127.0.0.1"), std::string::npos) << e;
  EXPECT_NE(e.find("HF_HUB_OFFLINE=1"), std::string::npos) << e;
  s_.endpoint = hub_.endpoint();
  resolve(make_ref("acme/tiny"), Need::kModel, s_);
  s_.endpoint = "http://127.0.0.1:" + std::to_string(test::closed_port());
  const Resolved r = resolve(make_ref("acme/tiny"), Need::kModel, s_);
  EXPECT_TRUE(r.from_cache_only);
  EXPECT_NE(r.note.find("using the cached snapshot " + kCommit.substr(0, 12)), std::string::npos) << r.note;
}

TEST_F(HubDownload, AnInterruptedTransferResumesWithARangeRequest) {
  const std::string bytes = file_bytes("model.safetensors");
  ASSERT_GT(bytes.size(), 200000u);
  hub_.cut("model.safetensors", 100000);
  const Resolved r = resolve(make_ref("acme/tiny"), Need::kModel, s_);
  const std::string sha = sha256_hex(bytes);
  EXPECT_EQ(test::read_file(repo_cache().blob(sha)), bytes);
  EXPECT_FALSE(fs::exists(repo_cache().incomplete(sha)));
  std::vector<std::string> ranges;
  for (const auto& q : hub_.requests())
    if (q.path == "/cdn/" + sha) ranges.push_back(q.range);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0], "");
  EXPECT_EQ(ranges[1], "bytes=100000-");
  EXPECT_EQ(load_model(r.path)->parameter_count(), load_model(model_->str())->parameter_count());
}

TEST_F(HubDownload, APartialFileFromAnEarlierRunIsResumed) {
  const std::string bytes = file_bytes("model.safetensors");
  const std::string sha = sha256_hex(bytes);
  s_.attempts = 1;
  hub_.cut("model.safetensors", 150000);
  std::string e = error_of("acme/tiny", ErrorKind::kInterrupted);
  EXPECT_NE(e.find("the next run resumes"), std::string::npos) << e;
  const fs::path part = repo_cache().incomplete(sha);
  EXPECT_EQ(fs::file_size(part), 150000u);
  EXPECT_FALSE(fs::exists(repo_cache().blob(sha)));
  hub_.clear_requests();
  resolve(make_ref("acme/tiny"), Need::kModel, s_);
  EXPECT_EQ(test::read_file(repo_cache().blob(sha)), bytes);
  ASSERT_EQ(hub_.count("GET", "/cdn/" + sha), 1);
  for (const auto& q : hub_.requests())
    if (q.path == "/cdn/" + sha) {
      EXPECT_EQ(q.range, "bytes=150000-");
    }
  EXPECT_FALSE(fs::exists(part));  // renamed into the blob
}

TEST_F(HubDownload, CorruptedBytesAreDetectedAndNeverInstalled) {
  // A regular file is checked against its git blob sha1 ...
  hub_.corrupt("config.json", true);
  std::string e = error_of("acme/tiny", ErrorKind::kIntegrity);
  EXPECT_NE(e.find("integrity check failed for 'config.json' of 'acme/tiny'"), std::string::npos) << e;
  EXPECT_NE(e.find("git blob sha1"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(repo_cache().snapshot(kCommit) / "config.json"));
  hub_.corrupt("config.json", false);
  // ... an LFS file against its sha256.
  hub_.corrupt("model.safetensors", true);
  const std::string sha = sha256_hex(file_bytes("model.safetensors"));
  e = error_of("acme/tiny", ErrorKind::kIntegrity);
  EXPECT_NE(e.find("integrity check failed for 'model.safetensors' of 'acme/tiny'"), std::string::npos) << e;
  EXPECT_NE(e.find("the Hub reports " + sha), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(repo_cache().blob(sha)));
  EXPECT_FALSE(fs::exists(repo_cache().incomplete(sha)));
  EXPECT_FALSE(fs::exists(repo_cache().snapshot(kCommit) / "model.safetensors"));
  hub_.corrupt("model.safetensors", false);
  EXPECT_NO_THROW(resolve(make_ref("acme/tiny"), Need::kModel, s_));
}

// Every digest the Hub offers is checked, whatever its spelling: an upper-case sha256 ETag, and the
// revision API's lfs.sha256 behind an ETag that is no digest.
TEST_F(HubDownload, DigestsAreCheckedFromEveryPlaceTheHubGivesThem) {
  const std::string bytes = file_bytes("model.safetensors");
  std::string upper = sha256_hex(bytes);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const std::string& etag : {upper, std::string("opaque-etag-1")}) {
    hub_.set_quirks("model.safetensors", {.etag = etag});
    hub_.corrupt("model.safetensors", true);
    const std::string e = error_of("acme/tiny", ErrorKind::kIntegrity);
    EXPECT_NE(e.find("sha256"), std::string::npos) << etag << ": " << e;
    EXPECT_FALSE(fs::exists(repo_cache().blob(etag))) << etag;
    EXPECT_FALSE(fs::exists(repo_cache().snapshot(kCommit) / "model.safetensors")) << etag;
    hub_.corrupt("model.safetensors", false);
  }
  // The same file uncorrupted installs under the ETag it came with.
  EXPECT_NO_THROW(resolve(make_ref("acme/tiny"), Need::kModel, s_));
  EXPECT_EQ(test::read_file(repo_cache().blob("opaque-etag-1")), bytes);
}

// Without any digest a partial file is never continued (the rest could come from another file):
// the transfer starts over, and the result has the announced size.
TEST_F(HubDownload, WithoutADigestAPartialFileIsNeverResumed) {
  const std::string bytes = file_bytes("model.safetensors");
  hub_.set_quirks("model.safetensors", {.etag = "opaque-etag-2", .api_digest = false});
  const fs::path part = repo_cache().incomplete("opaque-etag-2");
  fs::create_directories(part.parent_path());
  std::ofstream(part, std::ios::binary) << std::string(150000, 'x');  // an earlier run's bytes, not this file's
  resolve(make_ref("acme/tiny"), Need::kModel, s_);
  EXPECT_EQ(test::read_file(repo_cache().blob("opaque-etag-2")), bytes);
  for (const auto& q : hub_.requests()) EXPECT_EQ(q.range, "") << q.path;
  // Interrupted, it says the next run starts over.
  s_.attempts = 1;
  hub_.set_quirks("config.json", {.etag = "opaque-etag-3", .api_digest = false});
  hub_.cut("config.json", 10);
  fs::remove_all(repo_cache().snapshot(kCommit));
  const std::string e = error_of("acme/tiny", ErrorKind::kInterrupted);
  EXPECT_NE(e.find("starts over"), std::string::npos) << e;
}

// No digest and no size: nothing could tell a cut transfer from the file. Refused before a byte.
TEST_F(HubDownload, AFileWithNeitherDigestNorSizeIsRefused) {
  hub_.set_quirks("model.safetensors", {.etag = "opaque-etag-4", .api_digest = false, .size = false});
  const std::string e = error_of("acme/tiny", ErrorKind::kIntegrity);
  EXPECT_NE(e.find("neither a digest nor a size for 'model.safetensors'"), std::string::npos) << e;
  EXPECT_EQ(hub_.count("GET", "/cdn/" + sha256_hex(file_bytes("model.safetensors"))), 0);
  EXPECT_FALSE(fs::exists(repo_cache().blob("opaque-etag-4")));
}

// A body of unknown size that ends early (cleanly, chunked) is caught by the digest.
TEST_F(HubDownload, AnEarlyEndOfABodyOfUnknownSizeIsCaught) {
  const std::string bytes = file_bytes("model.safetensors");
  const std::string sha = sha256_hex(bytes);
  hub_.set_quirks("model.safetensors", {.etag = {}, .size = false, .end_after = bytes.size() / 2});
  const std::string e = error_of("acme/tiny", ErrorKind::kIntegrity);
  EXPECT_NE(e.find("integrity check failed for 'model.safetensors'"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(repo_cache().blob(sha)));
  EXPECT_FALSE(fs::exists(repo_cache().incomplete(sha)));
}

// A drip below the minimum rate ends after the stall window; one just above it ends at the
// transfer's deadline.
TEST_F(HubDownload, SlowDripsEnd) {
  s_.attempts = 1;
  s_.min_rate_bytes_s = 1000;
  s_.stall_timeout_s = 1;
  hub_.set_quirks("model.safetensors", {.etag = {}, .drip_ms = 50, .drip_bytes = 1});  // 20 bytes/s
  auto t0 = std::chrono::steady_clock::now();
  std::string e = error_of("acme/tiny", ErrorKind::kInterrupted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << e;
  s_.transfer_deadline_s = 1;
  hub_.set_quirks("model.safetensors", {.etag = {}, .drip_ms = 20, .drip_bytes = 256});  // ~12 KB/s: minutes for the file
  t0 = std::chrono::steady_clock::now();
  e = error_of("acme/tiny", ErrorKind::kInterrupted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << e;
  EXPECT_FALSE(fs::exists(repo_cache().blob(sha256_hex(file_bytes("model.safetensors")))));
}

// An API answer larger than the cap is refused, not read into memory.
TEST_F(HubDownload, OversizedApiAnswersAreRefused) {
  hub_.pad_api_answers(1 << 20);
  s_.max_answer_bytes = 64 * 1024;
  const std::string e = error_of("acme/tiny", ErrorKind::kHttp);
  EXPECT_NE(e.find("larger than 65536 bytes"), std::string::npos) << e;
}

TEST_F(HubDownload, GatedRepositoriesNeedTheToken) {
  test::FakeHub::Repo gated;
  gated.commit = kCommit;
  gated.gated_token = "hf_right";
  gated.files = {{"config.json", test::read_file(model_->path() / "config.json")},
                 {"model.safetensors", file_bytes("model.safetensors")}};
  hub_.add_repo("acme/gated", gated);
  std::string e = error_of("acme/gated", ErrorKind::kHttp);
  EXPECT_NE(e.find("HTTP 401"), std::string::npos) << e;
  EXPECT_NE(e.find("gated or private"), std::string::npos) << e;
  EXPECT_NE(e.find("set HF_TOKEN"), std::string::npos) << e;
  EXPECT_NE(e.find(hub_.endpoint() + "/acme/gated"), std::string::npos) << e;
  s_.token = "hf_wrong";
  e = error_of("acme/gated", ErrorKind::kHttp);
  EXPECT_NE(e.find("HTTP 403"), std::string::npos) << e;
  EXPECT_NE(e.find("the token in HF_TOKEN has no access"), std::string::npos) << e;
  s_.token = "hf_right";
  EXPECT_NO_THROW(resolve(make_ref("acme/gated"), Need::kModel, s_));
  for (const auto& q : hub_.requests())
    if (q.path.find("/acme/gated/resolve/") == 0 && q.status < 400) {
      EXPECT_EQ(q.auth, "Bearer hf_right");
    }
}

TEST_F(HubDownload, MissingRepositoriesRevisionsAndFilesAre404s) {
  std::string e = error_of("acme/nope", ErrorKind::kHttp);
  EXPECT_NE(e.find("HTTP 404: repository 'acme/nope' was not found on " + hub_.endpoint()), std::string::npos) << e;
  EXPECT_NE(e.find("if it is private or gated, set HF_TOKEN"), std::string::npos) << e;
  e = error_of("acme/tiny@nope", ErrorKind::kHttp);
  EXPECT_NE(e.find("revision 'nope' of repository 'acme/tiny' does not exist"), std::string::npos) << e;
  e = error_of("acme/tiny/missing.gguf", ErrorKind::kUsage);
  EXPECT_NE(e.find("has no file 'missing.gguf'"), std::string::npos) << e;
  // The "not found" of a reference that could have been a local path says so.
  try {
    resolve_model_arg("acme/nope", Need::kModel, s_);
    FAIL();
  } catch (const HubError& err) {
    EXPECT_NE(std::string(err.what()).find("no local path 'acme/nope'"), std::string::npos) << err.what();
  }
}

TEST_F(HubDownload, GgufRepositoriesFetchOneQuant) {
  const std::string gguf = test::read_file(test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.gguf");
  test::FakeHub::Repo r;
  r.commit = kCommit;
  r.files = {{"README.md", "x"}, {"tiny-Q4_K_M.gguf", gguf}, {"tiny-Q8_0.gguf", gguf + std::string(32, '\0')},
             {"tiny-F16-00001-of-00002.gguf", "a"}, {"tiny-F16-00002-of-00002.gguf", "b"}};
  hub_.add_repo("acme/tiny-GGUF", r);
  Resolved q = resolve(make_ref("acme/tiny-GGUF"), Need::kModel, s_);
  EXPECT_EQ(q.path, (repo_cache("acme/tiny-GGUF").snapshot(kCommit) / "tiny-Q4_K_M.gguf").string());
  EXPECT_EQ(hub_.count("GET", "/cdn/"), 1);
  EXPECT_EQ(load_model(q.path)->config().vocab_size, load_model(test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.gguf")->config().vocab_size);
  q = resolve(make_ref("acme/tiny-GGUF:q8_0"), Need::kTokenizer, s_);
  EXPECT_EQ(fs::path(q.path).filename(), "tiny-Q8_0.gguf");
  EXPECT_EQ(resolve(make_ref("acme/tiny-GGUF/tiny-Q8_0.gguf"), Need::kModel, s_).path, q.path);
  const std::string e = error_of("acme/tiny-GGUF:F16", ErrorKind::kUsage);
  EXPECT_NE(e.find("split GGUF"), std::string::npos) << e;
  EXPECT_EQ(hub_.count("GET", "00001-of"), 0);
  s_.offline = true;
  EXPECT_EQ(resolve(make_ref("acme/tiny-GGUF:Q8_0"), Need::kModel, s_).path, q.path);
}

TEST_F(HubDownload, ShardedCheckpointsFetchEveryShardOfTheIndex) {
  test::FakeHub::Repo r;
  r.commit = kCommit;
  r.files = {{"config.json", "{}"},
             {"model.safetensors.index.json", R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})"},
             {"model-00001-of-00002.safetensors", "one"},
             {"model-00002-of-00002.safetensors", "two"},
             {"model-old.safetensors", "unused"}};
  hub_.add_repo("acme/sharded", r);
  const Resolved res = resolve(make_ref("acme/sharded"), Need::kModel, s_);
  EXPECT_EQ(res.files, (std::vector<std::string>{"config.json", "model.safetensors.index.json",
                                                 "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  EXPECT_EQ(hub_.count("GET", "/cdn/"), 2);
  EXPECT_EQ(test::read_file(fs::path(res.path) / "model-00002-of-00002.safetensors"), "two");
  s_.offline = true;
  EXPECT_EQ(resolve(make_ref("acme/sharded"), Need::kModel, s_).files, res.files);
  fs::remove(repo_cache("acme/sharded").blob(sha256_hex("two")));
  const std::string e = error_of("acme/sharded", ErrorKind::kNotCached);
  EXPECT_NE(e.find("shard 'model-00002-of-00002.safetensors' is missing"), std::string::npos) << e;
}

TEST_F(HubDownload, ACacheFilledByHuggingfaceHubIsUsedAsIs) {
  // Lay the model out as huggingface_hub's snapshot_download would have.
  const RepoCache c = repo_cache();
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    const std::string bytes = file_bytes(f);
    const std::string etag = test::FakeHub::is_lfs(f, bytes) ? sha256_hex(bytes) : git_blob_sha1(bytes);
    fs::create_directories(c.blob(etag).parent_path());
    fs::copy_file(model_->path() / f, c.blob(etag));
    fs::create_directories(c.snapshot(kCommit));
    fs::create_symlink("../../blobs/" + etag, c.snapshot(kCommit) / f);
  }
  fs::create_directories(c.dir() / "refs");
  std::ofstream(c.dir() / "refs/main") << kCommit;
  const Resolved r = resolve(make_ref("acme/tiny"), Need::kModel, s_);
  EXPECT_EQ(r.downloaded, 0);
  EXPECT_EQ(hub_.count("HEAD", "/resolve/"), 0);
  EXPECT_EQ(hub_.count("GET", "/resolve/"), 0);
  s_.offline = true;
  EXPECT_EQ(resolve(make_ref("acme/tiny"), Need::kModel, s_).path, r.path);
}

TEST_F(HubDownload, RenamedRepositoriesFollowTheHubsRelativeRedirects) {
  hub_.add_alias("oldname/tiny", "acme/tiny");
  const Resolved r = resolve(make_ref("oldname/tiny"), Need::kModel, s_);
  // Stored under the name asked for, as huggingface_hub stores it.
  EXPECT_EQ(r.path, repo_cache("oldname/tiny").snapshot(kCommit).string());
  EXPECT_EQ(test::read_file(fs::path(r.path) / "config.json"), file_bytes("config.json"));
  EXPECT_GT(hub_.count("HEAD", "/oldname/tiny/resolve/"), 0);
  EXPECT_GT(hub_.count("HEAD", "/acme/tiny/resolve/"), 0);
}

TEST_F(HubDownload, LocalPathsWinOverReferences) {
  s_.endpoint = "http://127.0.0.1:" + std::to_string(test::closed_port());
  EXPECT_EQ(resolve_model_arg(model_->str(), Need::kModel, s_), model_->str());
  EXPECT_EQ(resolve_model_arg("/nonexistent/model", Need::kModel, s_), "/nonexistent/model");
  EXPECT_EQ(resolve_model_arg("plainname", Need::kModel, s_), "plainname");
  // A folder named like a reference, relative to the working directory.
  const test::TempDir cwd("lfm_hub_cwd");
  fs::create_directories(cwd.path() / "acme");
  fs::create_directory_symlink(model_->path(), cwd.path() / "acme/tiny");
  const fs::path old = fs::current_path();
  fs::current_path(cwd.path());
  EXPECT_EQ(resolve_model_arg("acme/tiny", Need::kModel, s_), "acme/tiny");
  fs::current_path(old);
}

}  // namespace
}  // namespace lfm::hub
