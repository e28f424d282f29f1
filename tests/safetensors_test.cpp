// Safetensors loading and validation: corrupt, truncated and hostile files each give their own
// clear error; checkpoints with missing, misshapen or unexpected tensors name the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/model.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "test_util.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:

  // Writes raw bytes: 8-byte little-endian header length, header text, data.
  std::string write_raw(const std::string& header, const std::string& data, int64_t declared_len = -1) {
    const std::string p = (dir_ / "x.safetensors").string();
    std::ofstream out(p, std::ios::binary);
    const uint64_t len = declared_len < 0 ? header.size() : static_cast<uint64_t>(declared_len);
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << data;
    return p;
  }

  void expect_error(const std::string& path, const std::string& needle) {
    try {
      SafetensorsFile f(path);
      ADD_FAILURE() << "no error; expected '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }

  // Copies fixture a into dir_/ckpt with the tensor set edited by `edit`.
  std::string edited_checkpoint(const std::function<void(std::vector<SafetensorsWriter::Entry>&)>& edit) {
    const std::string src_dir = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32");
    const fs::path out = dir_ / "ckpt";
    fs::create_directories(out);
    fs::copy_file(src_dir + "/config.json", out / "config.json");
    SafetensorsFile src(src_dir + "/model.safetensors");
    std::vector<SafetensorsWriter::Entry> entries;
    for (const auto& n : src.names()) entries.push_back({n, src.find(n)->dtype, src.find(n)->shape});
    edit(entries);
    SafetensorsWriter w((out / "model.safetensors").string(), entries);
    for (const auto& e : entries) {
      const TensorView* v = src.find(e.name);
      size_t bytes = 1;
      for (int64_t d : e.shape) bytes *= d;
      bytes *= dtype_traits(e.dtype).block_bytes;
      std::vector<uint8_t> data(bytes, 0);
      if (v) std::memcpy(data.data(), v->data, std::min(bytes, v->nbytes));
      w.write(e.name, data.data(), bytes);
    }
    w.finish();
    return out.string();
  }

  void expect_model_error(const std::string& dir, const std::string& needle) {
    try {
      load_model(dir);
      ADD_FAILURE() << "no error; expected '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }

  test::TempDir dir_{"lfm_st"};
};

TEST_F(SafetensorsTest, ReadsFixtureWithoutCopying) {
  SafetensorsFile f(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32") + "/model.safetensors");
  const TensorView* e = f.find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(e->dtype, DType::F32);
  EXPECT_EQ(e->nbytes, 256u * 64 * 4);
}

TEST_F(SafetensorsTest, TooShortForLength) {
  const std::string p = (dir_ / "short.safetensors").string();
  std::ofstream(p, std::ios::binary) << "abc";
  expect_error(p, "too short for the 8-byte header length");
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  expect_error(write_raw("{}", "", 4096), "declares a header of 4096 bytes but the file has only 2");
}

TEST_F(SafetensorsTest, AbsurdHeaderLength) {
  expect_error(write_raw("{}", "", int64_t{1} << 40), "limit");
}

TEST_F(SafetensorsTest, HeaderNotJson) { expect_error(write_raw("{not json", ""), "header is not valid JSON"); }

TEST_F(SafetensorsTest, HeaderNotObject) { expect_error(write_raw("[1,2]", ""), "header is not a JSON object"); }

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  expect_error(write_raw(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0')),
               "offsets [0, 16) exceed the data section of 8 bytes");
}

TEST_F(SafetensorsTest, SizeDisagreesWithShape) {
  expect_error(write_raw(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", std::string(16, '\0')),
               "holds 16 bytes but F32 [3] needs 12");
}

TEST_F(SafetensorsTest, UnsupportedDtype) {
  expect_error(write_raw(R"({"t":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", std::string(4, '\0')),
               "unsupported dtype 'I8'");
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  expect_error(write_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                         std::string(16, '\0')),
               "overlap");
}

TEST_F(SafetensorsTest, NegativeOrMalformedOffsets) {
  expect_error(write_raw(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", std::string(4, '\0')),
               "data_offsets must be two non-negative integers");
  expect_error(write_raw(R"({"t":{"dtype":"F32","shape":[1]}})", std::string(4, '\0')),
               "lacks dtype, shape or data_offsets");
}

TEST_F(SafetensorsTest, TruncatedFixture) {
  const std::string src = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32") + "/model.safetensors";
  const std::string p = (dir_ / "trunc.safetensors").string();
  fs::copy_file(src, p);
  fs::resize_file(p, fs::file_size(p) - 1000);
  expect_error(p, "exceed the data section");
}

TEST_F(SafetensorsTest, MisalignedDataIsCopiedNotMisread) {
  // Header of odd length puts F32 data at an unaligned address; values must still read right.
  const float vals[2] = {1.5f, -2.25f};
  std::string data(reinterpret_cast<const char*>(vals), 8);
  SafetensorsFile f(write_raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )", data));
  const float* p = static_cast<const float*>(f.find("t")->data);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4, 0u);
  EXPECT_EQ(p[0], 1.5f);
  EXPECT_EQ(p[1], -2.25f);
}

TEST_F(SafetensorsTest, MissingTensorIsNamed) {
  const auto dir = edited_checkpoint([](auto& e) {
    std::erase_if(e, [](const auto& x) { return x.name == "model.layers.1.self_attn.k_proj.weight"; });
  });
  expect_model_error(dir, "missing tensor 'model.layers.1.self_attn.k_proj.weight' (expected shape [32, 64])");
}

TEST_F(SafetensorsTest, WrongShapeIsNamed) {
  const auto dir = edited_checkpoint([](auto& e) {
    for (auto& x : e)
      if (x.name == "model.layers.0.conv.in_proj.weight") x.shape = {190, 64};
  });
  expect_model_error(dir, "tensor 'model.layers.0.conv.in_proj.weight' has shape [190, 64], expected [192, 64]");
}

TEST_F(SafetensorsTest, UnexpectedTensorIsNamed) {
  const auto dir = edited_checkpoint([](auto& e) { e.push_back({"model.layers.0.mystery.weight", DType::F32, {4}}); });
  expect_model_error(dir, "unexpected tensor 'model.layers.0.mystery.weight'");
}

TEST_F(SafetensorsTest, OtherDtypesLoadAndAgree) {
  // The same checkpoint stored as F16 and BF16 loads; values decode to nearby floats.
  for (DType dt : {DType::F16, DType::BF16}) {
    const auto dir = edited_checkpoint([dt](auto& e) {
      for (auto& x : e) x.dtype = dt;
    });
    // Bytes were copied raw (meaningless as F16/BF16) but shapes and types must bind.
    EXPECT_NO_THROW(load_model(dir)) << dtype_name(dt);
    fs::remove_all(dir);
  }
}

TEST_F(SafetensorsTest, ShardedCheckpoint) {
  // Split fixture a into two shards with an index; logits-level equality is covered by the
  // weights being byte-identical views.
  const std::string src_dir = test::fixture_dir("lfm2_a_fullattnidxs_tied_f32");
  SafetensorsFile src(src_dir + "/model.safetensors");
  const fs::path out = dir_ / "sharded";
  fs::create_directories(out);
  fs::copy_file(src_dir + "/config.json", out / "config.json");
  auto names = src.names();
  nlohmann::json index;
  for (int shard = 0; shard < 2; ++shard) {
    std::vector<SafetensorsWriter::Entry> entries;
    const std::string fname = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
    for (size_t i = shard; i < names.size(); i += 2) {
      entries.push_back({names[i], src.find(names[i])->dtype, src.find(names[i])->shape});
      index["weight_map"][names[i]] = fname;
    }
    SafetensorsWriter w((out / fname).string(), entries);
    for (const auto& e : entries) w.write(e.name, src.find(e.name)->data, src.find(e.name)->nbytes);
    w.finish();
  }
  std::ofstream(out / "model.safetensors.index.json") << index.dump();
  auto m = load_model(out.string());
  auto ref = load_model(src_dir);
  EXPECT_EQ(m->parameter_count(), ref->parameter_count());
  const TensorView* a = m->source().find("model.layers.5.feed_forward.w2.weight");
  const TensorView* b = ref->source().find("model.layers.5.feed_forward.w2.weight");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0);

  index["weight_map"]["model.embed_tokens.weight"] = "../escape.safetensors";
  std::ofstream(out / "model.safetensors.index.json") << index.dump();
  expect_model_error(out.string(), "outside the folder");
}

TEST_F(SafetensorsTest, FolderWithoutWeights) {
  fs::copy_file(test::fixture_dir("lfm2_a_fullattnidxs_tied_f32") + "/config.json", dir_ / "config.json");
  expect_model_error(dir_.str(), "has neither model.safetensors nor model.safetensors.index.json");
}

}  // namespace
}  // namespace lfm

namespace lfm {
namespace {

// Issue 41, item 5: two entries for one tensor name are ambiguous (readers disagree on which wins).
TEST_F(SafetensorsTest, DuplicateTensorNamesAreRefused) {
  expect_error(write_raw(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         std::string(8, '\0')),
               "key 't' appears twice in one object");
}

}  // namespace
}  // namespace lfm
