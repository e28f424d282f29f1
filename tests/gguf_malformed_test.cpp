// Hostile and broken GGUF files: each defect is a specific lfm::Error, never a crash, an
// out-of-bounds read or a huge allocation (run under the sanitizer build to see the latter).
// Files are assembled byte by byte here so every field can be corrupted on purpose.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "formats/gguf_reader.h"
#include "test_util.h"
#include "model/model.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

// Little-endian byte builder.
struct Bytes {
  std::string s;
  Bytes& u32(uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); return *this; }
  Bytes& u64(uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); return *this; }
  Bytes& f32(float v) { s.append(reinterpret_cast<const char*>(&v), 4); return *this; }
  Bytes& str(const std::string& t) { u64(t.size()); s += t; return *this; }
  Bytes& pad(size_t align) { while (s.size() % align) s.push_back('\0'); return *this; }
};

struct Tensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
};

// A GGUF with one u32 metadata entry (or `kv` raw entries) and the given tensor infos, followed by
// `data_bytes` bytes of data.
std::string build(const std::vector<Tensor>& tensors, size_t data_bytes, uint32_t version = 3,
                  const std::string& kv_raw = "", uint64_t n_kv = 0, const char* magic = "GGUF") {
  Bytes b;
  b.s.append(magic, 4);
  b.u32(version).u64(tensors.size()).u64(n_kv);
  b.s += kv_raw;
  for (const Tensor& t : tensors) {
    b.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) b.u64(d);
    b.u32(t.type).u64(t.offset);
  }
  b.pad(32);
  b.s.append(data_bytes, '\0');
  return b.s;
}

class GgufMalformed : public ::testing::Test {
 protected:

  std::string write(const std::string& bytes) {
    const std::string p = (dir_ / "x.gguf").string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  void expect_error(const std::string& bytes, const std::string& needle) {
    try {
      gguf::GgufFile f(write(bytes));
      ADD_FAILURE() << "no error; expected '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  test::TempDir dir_{"lfm_gguf_bad"};
};

TEST_F(GgufMalformed, AWellFormedFileReads) {
  Bytes kv;
  kv.str("a.count").u32(static_cast<uint32_t>(gguf::ValueType::U32)).u32(7);
  // A nested array: [[1, 2], [3]] of i32.
  kv.str("a.nested").u32(9).u32(9).u64(2);
  kv.u32(5).u64(2).u32(1).u32(2);
  kv.u32(5).u64(1).u32(3);
  const std::string bytes = build({{"t0", {8}, 0, 0}, {"t1", {4, 2}, 1, 32}}, 64, 3, kv.s, 2);
  gguf::GgufFile f(write(bytes));
  EXPECT_EQ(f.find("a.count")->as_int("a.count"), 7);
  const auto& nested = f.find("a.nested")->as_array("a.nested");
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[0].arr.size(), 2u);
  EXPECT_EQ(nested[1].arr[0].as_int("x"), 3);
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.find_tensor("t1")->dtype, DType::F16);
  EXPECT_EQ(f.find_tensor("t1")->nbytes, 16u);
  // Version 2 has the same layout.
  gguf::GgufFile v2(write(build({{"t0", {8}, 0, 0}}, 32, 2)));
  EXPECT_EQ(v2.version(), 2u);
}

TEST_F(GgufMalformed, BadMagic) { expect_error(build({}, 0, 3, "", 0, "GGUX"), "bad magic"); }

TEST_F(GgufMalformed, BadVersion) {
  expect_error(build({}, 0, 4), "unsupported GGUF version 4");
  expect_error(build({}, 0, 1), "version 1, which is not supported");
  expect_error(build({}, 0, 0x03000000), "big-endian");
}

TEST_F(GgufMalformed, UnknownAndUnsupportedTensorTypes) {
  expect_error(build({{"w", {32}, 99, 0}}, 64), "unknown tensor type id 99");
  expect_error(build({{"w", {256}, 10, 0}}, 256), "ggml type Q2_K which lfm does not support");
}

TEST_F(GgufMalformed, RowLengthNotAMultipleOfTheBlock) {
  expect_error(build({{"w", {48}, 8, 0}}, 64), "not a multiple of the Q8_0 block size 32");
}

TEST_F(GgufMalformed, TruncatedData) {
  expect_error(build({{"w", {64}, 0, 0}}, 100), "exceeds the data section of 100 bytes");
  Bytes kv;
  kv.str("general.name").u32(8).str(std::string(100, 'x'));
  const std::string ok = build({{"w", {8}, 0, 0}}, 32, 3, kv.s, 1);
  const size_t info_start = 24 + kv.s.size();
  expect_error(ok.substr(0, info_start + 12), "file ends inside");  // cut inside the tensor info
  expect_error(ok.substr(0, 60), "declares a string of 100 bytes");   // cut inside the value
}

TEST_F(GgufMalformed, AbsurdCounts) {
  Bytes b;
  b.s = "GGUF";
  b.u32(3).u64(1ull << 60).u64(0);
  expect_error(b.s, "absurd tensor count");
  Bytes c;
  c.s = "GGUF";
  c.u32(3).u64(0).u64(1ull << 60);
  expect_error(c.s, "absurd metadata count");
  c.s = "GGUF";
  c.u32(3).u64(0).u64(1000);
  expect_error(c.s, "absurd metadata count");
}

TEST_F(GgufMalformed, AbsurdStringLength) {
  Bytes kv;
  kv.u64(1ull << 62);  // key length
  kv.s.append(32, '\0');
  expect_error(build({}, 0, 3, kv.s, 1), "declares a string of 4611686018427387904 bytes");
}

TEST_F(GgufMalformed, AbsurdArrayLength) {
  Bytes kv;
  kv.str("a.arr").u32(9).u32(5).u64(1ull << 61);
  expect_error(build({}, 0, 3, kv.s, 1), "absurd array length");
  Bytes many;  // more elements than the per-file cap, each one byte in the file
  many.str("a.bytes").u32(9).u32(0).u64(uint64_t{1} << 24);
  many.s.append(size_t{1} << 24, '\0');
  expect_error(build({}, 0, 3, many.s, 1), "beyond lfm's limit");
  Bytes deep;  // arrays nested past the limit
  deep.str("a.deep");
  deep.u32(9);
  for (int k = 0; k < 20; ++k) deep.u32(9).u64(1);
  deep.u32(5).u64(0);
  expect_error(build({}, 0, 3, deep.s, 1), "nests arrays deeper");
}

TEST_F(GgufMalformed, AbsurdDims) {
  expect_error(build({{"w", {2, 2, 2, 2, 2}, 0, 0}}, 128), "n_dims 5");
  expect_error(build({{"w", {1ull << 40, 1ull << 40}, 0, 0}}, 64), "absurd dimension");
  expect_error(build({{"w", {0}, 0, 0}}, 64), "absurd dimension 0 = 0");
}

TEST_F(GgufMalformed, MisalignedOffset) {
  expect_error(build({{"w", {8}, 0, 4}}, 64), "misaligned offset");
  Bytes kv;
  kv.str("general.alignment").u32(4).u32(24);
  expect_error(build({}, 0, 3, kv.s, 1), "general.alignment 24 is not a power of two");
}

TEST_F(GgufMalformed, OverlappingTensors) {
  expect_error(build({{"a", {16}, 0, 0}, {"b", {8}, 0, 32}}, 128), "tensors 'a' and 'b' overlap");
}

TEST_F(GgufMalformed, DuplicatesAndBadValues) {
  expect_error(build({{"a", {8}, 0, 0}, {"a", {8}, 0, 32}}, 64), "duplicate tensor name 'a'");
  Bytes kv;
  kv.str("k").u32(4).u32(1).str("k").u32(4).u32(2);
  expect_error(build({}, 0, 3, kv.s, 2), "duplicate metadata key 'k'");
  Bytes bad_type;
  bad_type.str("k").u32(42);
  expect_error(build({}, 0, 3, bad_type.s, 1), "unknown value type 42");
  Bytes bad_bool;
  bad_bool.str("k").u32(7).s.push_back('\x05');
  expect_error(build({}, 0, 3, bad_bool.s, 1), "bool byte 5");
}

TEST_F(GgufMalformed, ModelLevelErrorsNameTheProblem) {
  // Valid GGUF container, wrong content: missing architecture, then an unknown tensor name.
  try {
    load_model(write(build({{"w", {8}, 0, 0}}, 32)));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lacks general.architecture"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lfm
