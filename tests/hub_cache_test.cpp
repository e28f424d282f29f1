// The cache layout shared with huggingface_hub (relative symlinks, refs, snapshots), listing and
// removing cached models, and the disk errors of writing into the cache.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "hub/blob_download.h"
#include "hub/cache_admin.h"
#include "hub/cache_layout.h"
#include "hub/hub_error.h"
#include "hub/model_ref.h"
#include "test_util.h"

namespace lfm::hub {
namespace {

namespace fs = std::filesystem;

const std::string kCommitA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const std::string kCommitB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

// Writes a blob and links it into a snapshot, as a download would.
void put(const RepoCache& c, const std::string& commit, const std::string& path, const std::string& etag,
         const std::string& bytes) {
  fs::create_directories(c.blob(etag).parent_path());
  std::ofstream(c.blob(etag), std::ios::binary) << bytes;
  c.link(commit, path, etag);
}

TEST(HubCache, SnapshotsAreRelativeSymlinksIntoBlobs) {
  const test::TempDir dir("lfm_hub_layout");
  const RepoCache c(dir.path(), "acme/tiny");
  EXPECT_EQ(c.dir(), dir.path() / "models--acme--tiny");
  put(c, kCommitA, "config.json", "e1", "{}");
  put(c, kCommitA, "onnx/deep/model.onnx", "e2", "xx");
  EXPECT_EQ(fs::read_symlink(c.snapshot(kCommitA) / "config.json"), "../../blobs/e1");
  EXPECT_EQ(fs::read_symlink(c.snapshot(kCommitA) / "onnx/deep/model.onnx"), "../../../../blobs/e2");
  EXPECT_EQ(test::read_file(c.snapshot(kCommitA) / "onnx/deep/model.onnx"), "xx");
  // Relinking to another blob replaces the link.
  put(c, kCommitA, "config.json", "e3", "{\"a\": 1}");
  EXPECT_EQ(fs::read_symlink(c.snapshot(kCommitA) / "config.json"), "../../blobs/e3");
  EXPECT_EQ(c.snapshot_files(kCommitA), (std::vector<std::string>{"config.json", "onnx/deep/model.onnx"}));
  EXPECT_TRUE(c.has_file(kCommitA, "config.json"));
  // A dangling link (its blob deleted) is not a cached file.
  fs::remove(c.blob("e2"));
  EXPECT_FALSE(c.has_file(kCommitA, "onnx/deep/model.onnx"));
  EXPECT_EQ(c.snapshot_files(kCommitA), std::vector<std::string>{"config.json"});
  EXPECT_FALSE(c.has_file(kCommitA, "../../blobs/e3"));
  EXPECT_EQ(c.lock_file("e1"), dir.path() / ".locks/models--acme--tiny/e1.lock");
}

TEST(HubCache, RefsHoldTheBareCommit) {
  const test::TempDir dir("lfm_hub_refs");
  const RepoCache c(dir.path(), "acme/tiny");
  EXPECT_FALSE(c.read_ref("main").has_value());
  c.write_ref("main", kCommitA);
  c.write_ref("refs/pr/1", kCommitB);
  EXPECT_EQ(test::read_file(c.dir() / "refs/main"), kCommitA);  // no newline, as huggingface_hub writes it
  EXPECT_EQ(c.read_ref("main").value_or(""), kCommitA);
  EXPECT_EQ(c.read_ref("refs/pr/1").value_or(""), kCommitB);
  // A ref written by another tool with a trailing newline reads the same.
  std::ofstream(c.dir() / "refs/v1") << kCommitB << "\n";
  EXPECT_EQ(c.read_ref("v1").value_or(""), kCommitB);
  EXPECT_FALSE(c.read_ref("../../x").has_value());
  EXPECT_THROW(c.write_ref("../escape", kCommitA), Error);
}

TEST(HubCache, ListAndRemoveModelsAndRevisions) {
  const test::TempDir dir("lfm_hub_admin");
  EXPECT_TRUE(scan_cache(dir.path() / "missing").empty());
  const RepoCache c(dir.path(), "acme/tiny");
  put(c, kCommitA, "config.json", "shared", std::string(100, 'c'));
  put(c, kCommitA, "model.safetensors", "wa", std::string(1000, 'a'));
  put(c, kCommitB, "config.json", "shared", std::string(100, 'c'));
  put(c, kCommitB, "model.safetensors", "wb", std::string(2000, 'b'));
  c.write_ref("main", kCommitB);
  c.write_ref("v1", kCommitA);
  const RepoCache other(dir.path(), "zeta/gguf");
  put(other, kCommitA, "m-Q4_K_M.gguf", "g", std::string(10, 'g'));
  fs::create_directories(dir.path() / "datasets--x--y");  // not a model: ignored

  auto repos = scan_cache(dir.path());
  ASSERT_EQ(repos.size(), 2u);
  EXPECT_EQ(repos[0].repo, "acme/tiny");
  EXPECT_EQ(repos[0].bytes, 3100u);
  ASSERT_EQ(repos[0].revisions.size(), 2u);
  EXPECT_EQ(repos[0].revisions[0].commit, kCommitA);
  EXPECT_EQ(repos[0].revisions[0].refs, std::vector<std::string>{"v1"});
  EXPECT_EQ(repos[0].revisions[0].bytes, 1100u);
  EXPECT_EQ(repos[0].revisions[1].refs, std::vector<std::string>{"main"});
  EXPECT_GT(repos[0].last_used, 0);
  EXPECT_EQ(repos[1].repo, "zeta/gguf");

  // One revision: its own blobs go, the shared one stays, and so does the other snapshot.
  ModelRef ref;
  ref.repo = "acme/tiny";
  ref.revision = "v1";
  ref.revision_given = true;
  Removal r = remove_cached(dir.path(), ref);
  EXPECT_EQ(r.freed, 1000u);
  EXPECT_EQ(r.commits, std::vector<std::string>{kCommitA});
  EXPECT_FALSE(fs::exists(c.snapshot(kCommitA)));
  EXPECT_FALSE(fs::exists(c.dir() / "refs/v1"));
  EXPECT_TRUE(fs::exists(c.blob("shared")));
  EXPECT_EQ(test::read_file(c.snapshot(kCommitB) / "config.json"), std::string(100, 'c'));
  ref.revision = "v1";
  try {
    remove_cached(dir.path(), ref);
    FAIL() << "removing a missing revision must fail";
  } catch (const HubError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotCached);
    EXPECT_NE(std::string(e.what()).find(kCommitB.substr(0, 12)), std::string::npos) << e.what();
  }
  // The whole repository.
  ref.revision_given = false;
  r = remove_cached(dir.path(), ref);
  EXPECT_EQ(r.freed, 2100u);
  EXPECT_FALSE(fs::exists(c.dir()));
  repos = scan_cache(dir.path());
  ASSERT_EQ(repos.size(), 1u);
  EXPECT_EQ(repos[0].repo, "zeta/gguf");
  EXPECT_THROW(remove_cached(dir.path(), ref), HubError);
}

TEST(HubCache, DiskFullIsNamed) {
  const int fd = ::open("/dev/full", O_WRONLY);
  if (fd < 0) GTEST_SKIP() << "no /dev/full";
  try {
    write_all(fd, "abc", 3, "/cache/blobs/x.incomplete");
    FAIL() << "writing to /dev/full must fail";
  } catch (const HubError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDisk);
    EXPECT_NE(std::string(e.what()).find("disk full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/cache/blobs/x.incomplete"), std::string::npos) << e.what();
  }
  ::close(fd);
  const test::TempDir dir("lfm_hub_space");
  EXPECT_NO_THROW(check_free_space(dir.path(), 1, "x"));
  try {
    check_free_space(dir.path(), uint64_t{1} << 62, "'big.gguf'");
    FAIL() << "4 EiB cannot be free";
  } catch (const HubError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDisk);
    EXPECT_NE(std::string(e.what()).find("not enough disk space for 'big.gguf'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lfm::hub
