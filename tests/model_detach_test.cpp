// A model run on a backend that reads only its prepared copies lets go of its files after load
// (LoadOptions::run_on, Model::detached): a file truncated or rewritten in place afterwards (`cp
// new.safetensors model/` does that) changes nothing it computes. Before, the next step touched
// mapped pages past the new end of file and the process died of SIGBUS (issue 41).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/thread_pool.h"
#include "kernels/backend_factory.h"
#include "kernels/reference_backend.h"
#include "model/model.h"
#include "model_test_util.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

void overwrite_in_place(const fs::path& p, char byte) {
  const auto size = fs::file_size(p);
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);  // same inode, no truncation
  const std::string junk(static_cast<size_t>(size), byte);
  f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
}

class ModelDetachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = make_backend(DeviceKind::kCpu, pool_);
    if (!backend_->reads_only_prepared_copies()) GTEST_SKIP() << backend_->name() << " reads the stored rows";
  }
  // Greedy tokens before, after the file is rewritten in place, and after it is truncated.
  void expect_unchanged(const fs::path& model_path, const fs::path& file) {
    auto m = load_model(model_path.string(), LoadOptions{.run_on = backend_.get()});
    ASSERT_TRUE(m->detached());
    EXPECT_GT(m->resident_bytes(), 0u);  // the embedding table at least
    EXPECT_LT(m->resident_bytes(), fs::file_size(file));
    const std::vector<int32_t> prompt = {1, 5, 9, 2, 7};
    const auto before = test::greedy(*m, *backend_, prompt, 6);
    overwrite_in_place(file, '\x7f');
    EXPECT_EQ(test::greedy(*m, *backend_, prompt, 6), before) << "rewritten in place";
    fs::resize_file(file, 0);
    EXPECT_EQ(test::greedy(*m, *backend_, prompt, 6), before) << "truncated";
  }
  ThreadPool pool_{2};
  std::unique_ptr<Backend> backend_;
};

TEST_F(ModelDetachTest, SafetensorsFileChangedInPlaceChangesNothing) {
  test::TempDir dir("lfm_detach");
  test::write_text_model(dir.str());
  expect_unchanged(dir.path(), dir / "model.safetensors");
}

TEST_F(ModelDetachTest, GgufFileChangedInPlaceChangesNothing) {
  test::TempDir dir("lfm_detach");
  const fs::path gguf = dir / "m.gguf";
  fs::copy_file(test::data_dir() + "/gguf_llamacpp/lfm2-tiny-random-f32.gguf", gguf);
  expect_unchanged(gguf, gguf);
}

// Without a backend to run on (tools, tests sharing one preparation across backends) the model
// keeps reading the mapping, as before; the reference backend reads packed matrices' stored rows.
TEST_F(ModelDetachTest, StaysMappedWhenTheRunnerMayReadTheStoredRows) {
  test::TempDir dir("lfm_detach");
  test::write_text_model(dir.str());
  EXPECT_FALSE(load_model(dir.str())->detached());
  ReferenceBackend ref(pool_);
  EXPECT_FALSE(ref.reads_only_prepared_copies());
  EXPECT_FALSE(load_model(dir.str(), LoadOptions{.run_on = &ref})->detached());
}

}  // namespace
}  // namespace lfm
