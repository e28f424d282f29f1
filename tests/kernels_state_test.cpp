// The state ops every backend implements for a whole step: K/V write + paged causal GQA
// attention, and the short conv with rolling-state slots and checkpoints. Checked against plain
// float64 computations written here, on random inputs of awkward sizes, for every storage type
// (the values the kernels see are the stored, rounded ones), shuffled block tables, several
// sequences per call, and the invariances the engine relies on: a sequence's results do not
// depend on its neighbours, on how its tokens are split into steps, or on the block size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu_backend.h"
#include "kernels/reference_backend.h"
#include "test_util.h"
#include "kernels/state_pools.h"

namespace lfm {
namespace {

using test::randn;

std::vector<float> rounded(DType t, std::vector<float> v) {
  round_to_state_type(t, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16};

// A KV pool with its own storage.
struct TestKv {
  TestKv(DType type, int64_t blocks, int64_t block_tokens, int64_t G, int64_t hd) {
    pool.type = type;
    pool.n_blocks = blocks;
    pool.block_tokens = block_tokens;
    pool.kv_heads = G;
    pool.head_dim = hd;
    const size_t bytes = pool.token_bytes() * static_cast<size_t>(blocks * block_tokens);
    k.assign(bytes, 0xAB);  // garbage: every value read must have been written
    v.assign(bytes, 0xCD);
    pool.k = k.data();
    pool.v = v.data();
  }
  KvPool pool;
  std::vector<uint8_t> k, v;
};

// One sequence: its whole K/V history [n, G, hd] and queries [n, H, hd].
struct Seq {
  int64_t n;
  std::vector<float> q, k, v;
  std::vector<int32_t> blocks;
};

// Reference: query i of `s` (position i) over keys 0..i, with K/V rounded to `type`.
std::vector<double> dense_attention(const Seq& s, DType type, int64_t i, int64_t H, int64_t G, int64_t hd,
                                    float scale) {
  const auto k = rounded(type, s.k), v = rounded(type, s.v);
  std::vector<double> out(static_cast<size_t>(H * hd));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / G);
    std::vector<double> sc;
    for (int64_t j = 0; j <= i; ++j) {
      double d = 0;
      for (int64_t e = 0; e < hd; ++e) d += double(s.q[(i * H + h) * hd + e]) * k[(j * G + g) * hd + e];
      sc.push_back(d * scale);
    }
    const double mx = *std::max_element(sc.begin(), sc.end());
    double z = 0;
    for (auto& e : sc) z += (e = std::exp(e - mx));
    for (int64_t e = 0; e < hd; ++e) {
      double o = 0;
      for (size_t j = 0; j < sc.size(); ++j) o += sc[j] / z * v[(j * G + g) * hd + e];
      out[h * hd + e] = o;
    }
  }
  return out;
}

// Every test runs on the portable reference backend and on each SIMD backend the CPU has.
class StateKernelsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!isa_supported(parse_isa(GetParam()))) GTEST_SKIP() << "CPU lacks " << GetParam();
    be_ = make_backend_for(parse_isa(GetParam()), pool_);
  }
  ThreadPool pool_{3};
  std::unique_ptr<Backend> be_;

  // Runs sequences `seqs` through kv_write + attention in steps: step t feeds chunk[t] tokens of
  // every sequence (all sequences packed in one call). Returns each sequence's outputs [n, H, hd].
  std::vector<std::vector<float>> run_attention(TestKv& kv, std::vector<Seq>& seqs,
                                                const std::vector<int64_t>& chunks, int64_t H, float scale) {
    const int64_t G = kv.pool.kv_heads, hd = kv.pool.head_dim;
    std::vector<std::vector<float>> outs(seqs.size());
    for (size_t s = 0; s < seqs.size(); ++s) outs[s].resize(static_cast<size_t>(seqs[s].n * H * hd));
    std::vector<int64_t> done(seqs.size(), 0);
    for (int64_t chunk : chunks) {
      std::vector<SeqRun> runs;
      std::vector<float> q, k, v;
      int64_t row = 0;
      for (size_t s = 0; s < seqs.size(); ++s) {
        const int64_t n = std::min(chunk, seqs[s].n - done[s]);
        if (n <= 0) continue;
        SeqRun r;
        r.row0 = row;
        r.n_rows = n;
        r.pos0 = done[s];
        r.blocks = seqs[s].blocks;
        runs.push_back(r);
        q.insert(q.end(), seqs[s].q.begin() + done[s] * H * hd, seqs[s].q.begin() + (done[s] + n) * H * hd);
        k.insert(k.end(), seqs[s].k.begin() + done[s] * G * hd, seqs[s].k.begin() + (done[s] + n) * G * hd);
        v.insert(v.end(), seqs[s].v.begin() + done[s] * G * hd, seqs[s].v.begin() + (done[s] + n) * G * hd);
        row += n;
      }
      std::vector<float> out(static_cast<size_t>(row * H * hd));
      be_->kv_write(kv.pool, runs, k.data(), v.data());
      be_->attention(q.data(), kv.pool, runs, H, scale, out.data(), 0);
      size_t ri = 0;
      for (size_t s = 0; s < seqs.size(); ++s) {
        const int64_t n = std::min(chunk, seqs[s].n - done[s]);
        if (n <= 0) continue;
        std::copy_n(out.begin() + runs[ri].row0 * H * hd, n * H * hd, outs[s].begin() + done[s] * H * hd);
        done[s] += n;
        ++ri;
      }
    }
    return outs;
  }

  // Sequences of the given lengths with block tables drawn from a shuffled pool.
  std::vector<Seq> make_seqs(const std::vector<int64_t>& lens, int64_t H, int64_t G, int64_t hd, int64_t block_tokens,
                             int64_t& n_blocks, uint64_t seed) {
    std::vector<Seq> seqs;
    n_blocks = 0;
    for (int64_t n : lens) n_blocks += (n + block_tokens - 1) / block_tokens;
    n_blocks += 3;  // spare blocks that nobody uses
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
    size_t next = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      Seq s;
      s.n = lens[i];
      s.q = randn(static_cast<size_t>(s.n * H * hd), seed + 10 * i + 1);
      s.k = randn(static_cast<size_t>(s.n * G * hd), seed + 10 * i + 2);
      s.v = randn(static_cast<size_t>(s.n * G * hd), seed + 10 * i + 3);
      for (int64_t b = 0; b < (s.n + block_tokens - 1) / block_tokens; ++b) s.blocks.push_back(ids[next++]);
      seqs.push_back(std::move(s));
    }
    return seqs;
  }
};

TEST_P(StateKernelsTest, PagedAttentionMatchesDenseForEveryTypeAndBlockSize) {
  const int64_t H = 6, G = 2, hd = 5;
  const float scale = 0.37f;
  for (DType type : kTypes)
    for (int64_t bt : {1, 3, 16}) {
      int64_t n_blocks = 0;
      auto seqs = make_seqs({7, 1, 12}, H, G, hd, bt, n_blocks, 42 + bt);
      TestKv kv(type, n_blocks, bt, G, hd);
      const auto outs = run_attention(kv, seqs, {4, 1, 5, 2}, H, scale);
      for (size_t s = 0; s < seqs.size(); ++s)
        for (int64_t i = 0; i < seqs[s].n; ++i) {
          const auto want = dense_attention(seqs[s], type, i, H, G, hd, scale);
          for (int64_t e = 0; e < H * hd; ++e)
            ASSERT_NEAR(outs[s][i * H * hd + e], want[e], 2e-5)
                << dtype_name(type) << " block " << bt << " seq " << s << " pos " << i << " elem " << e;
        }
    }
}

// The head sizes the SIMD backends have dedicated tasks for (64 as in every LFM2, 128), with
// sequences shorter and longer than the 32-key softmax tile, partial last tiles, one key, block
// tables that cross tiles at odd places, and several steps per sequence.
TEST_P(StateKernelsTest, PagedAttentionMatchesDenseForFastHeadSizes) {
  const int64_t H = 6, G = 2;
  const float scale = 0.125f;
  for (int64_t hd : {64, 128})
    for (DType type : kTypes)
      for (int64_t bt : {1, 5, 16}) {
        int64_t n_blocks = 0;
        auto seqs = make_seqs({70, 1, 33}, H, G, hd, bt, n_blocks, 7 + bt + hd);
        TestKv kv(type, n_blocks, bt, G, hd);
        const auto outs = run_attention(kv, seqs, {31, 1, 38}, H, scale);
        for (size_t s = 0; s < seqs.size(); ++s)
          for (int64_t i = 0; i < seqs[s].n; ++i) {
            const auto want = dense_attention(seqs[s], type, i, H, G, hd, scale);
            for (int64_t e = 0; e < H * hd; ++e)
              ASSERT_NEAR(outs[s][i * H * hd + e], want[e], 2e-5) << "head_dim " << hd << " " << dtype_name(type)
                                                                   << " block " << bt << " seq " << s << " pos " << i
                                                                   << " elem " << e;
          }
      }
}

TEST_P(StateKernelsTest, PagedAttentionIgnoresNeighboursChunkingAndBlockSize) {
  const int64_t H = 4, G = 1;
  for (int64_t hd : {8, 64})  // the generic task and the fast one
    for (DType type : kTypes) {
      std::vector<std::vector<float>> reference;
      for (int64_t bt : {1, 4, 64}) {
        int64_t n_blocks = 0;
        // The sequence of interest is always the first, with the same data (seed fixed per length);
        // 45 keys: one whole 32-key tile and a partial one.
        auto seqs = make_seqs({45, 5, 9}, H, G, hd, bt, n_blocks, 7);
        for (const std::vector<int64_t>& chunks : {std::vector<int64_t>{45}, {1, 1, 1, 1, 41}, {6, 7, 32}}) {
          auto alone = std::vector<Seq>{seqs[0]};
          TestKv kv1(type, n_blocks, bt, G, hd), kv2(type, n_blocks, bt, G, hd);
          const auto a = run_attention(kv1, alone, chunks, H, 0.5f)[0];
          const auto b = run_attention(kv2, seqs, chunks, H, 0.5f)[0];
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
              << "head_dim " << hd << " " << dtype_name(type) << " neighbours changed it";
          if (reference.empty()) reference.push_back(a);
          ASSERT_EQ(std::memcmp(a.data(), reference[0].data(), a.size() * 4), 0)
              << "head_dim " << hd << " " << dtype_name(type) << " block " << bt << ": chunking or block size changed it";
        }
      }
    }
}

// Contexts longer than the SIMD backends' 256-key segments: a one-row step (decode) splits its
// context over the threads segment by segment, a many-row step walks the segments in order, and
// both must give every query the same bits, whatever the step pattern, the neighbours, the block
// size or the thread count; and the right values (checked against float64 around the segment
// boundaries).
TEST_P(StateKernelsTest, PagedAttentionOverLongContextsIsExactAndInvariant) {
#if defined(__SANITIZE_ADDRESS__)
  // The plain reference loops over 540 positions take three minutes under ASan; its memory
  // accesses are the same at every length (PagedAttentionMatchesDense covers them here), and the
  // release build runs this test on it in full.
  if (GetParam() == "generic") GTEST_SKIP() << "reference backend: run in full in the release build";
#endif
  const int64_t H = 8, G = 2, n = 540;
  const float scale = 0.125f;
  ThreadPool one_thread(1);
  auto serial = make_backend_for(parse_isa(GetParam()), one_thread);
  // Decode steps across the boundaries at 256 and 512, prefill chunks in between.
  std::vector<int64_t> decode_steps = {250};
  for (int i = 0; i < 10; ++i) decode_steps.push_back(1);
  decode_steps.push_back(240);
  for (int i = 0; i < 20; ++i) decode_steps.push_back(1);
  decode_steps.push_back(20);
  for (int64_t hd : {64, 128})
    for (DType type : kTypes) {
      std::vector<float> reference;
      // 16: a tile is two whole blocks; 48: blocks straddle tiles (both take the SIMD backends'
      // one-row path in decode); 5: no whole vector of positions in a block (the general path).
      for (int64_t bt : {16, 48, 5}) {
        if (bt != 16 && type != DType::F16) continue;  // the block size matters to the addressing only
        int64_t n_blocks = 0;
        auto seqs = make_seqs({n, 40, 3}, H, G, hd, bt, n_blocks, 11 + hd);
        auto alone = std::vector<Seq>{seqs[0]};
        for (const std::vector<int64_t>& chunks : {std::vector<int64_t>{n}, decode_steps}) {
          TestKv kv1(type, n_blocks, bt, G, hd), kv2(type, n_blocks, bt, G, hd);
          const auto a = run_attention(kv1, alone, chunks, H, scale)[0];
          const auto b = run_attention(kv2, seqs, chunks, H, scale)[0];
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
              << "head_dim " << hd << " " << dtype_name(type) << " block " << bt << ": neighbours changed it";
          if (reference.empty()) {
            reference = a;
            for (int64_t i : {0, 255, 256, 257, 300, 511, 512, 513, 539}) {
              const auto want = dense_attention(seqs[0], type, i, H, G, hd, scale);
              for (int64_t e = 0; e < H * hd; ++e)
                ASSERT_NEAR(a[i * H * hd + e], want[e], 2e-5)
                    << "head_dim " << hd << " " << dtype_name(type) << " pos " << i << " elem " << e;
            }
          }
          ASSERT_EQ(std::memcmp(a.data(), reference.data(), a.size() * 4), 0)
              << "head_dim " << hd << " " << dtype_name(type) << " block " << bt << " steps " << chunks.size()
              << ": step pattern or block size changed it";
        }
        // One thread instead of three: the same bits.
        std::swap(be_, serial);
        TestKv kv(type, n_blocks, bt, G, hd);
        const auto c = run_attention(kv, seqs, decode_steps, H, scale)[0];
        std::swap(be_, serial);
        ASSERT_EQ(std::memcmp(c.data(), reference.data(), c.size() * 4), 0)
            << "head_dim " << hd << " " << dtype_name(type) << " block " << bt << ": thread count changed it";
      }
    }
}

TEST_P(StateKernelsTest, BadRunsAreRejected) {
  TestKv kv(DType::F32, 2, 4, 1, 4);
  std::vector<float> q(4 * 4), k(4), v(4), out(4 * 4);
  const std::vector<int32_t> blocks = {0};
  SeqRun r;
  r.n_rows = 1;
  r.pos0 = 4;  // block 1 is not in the table
  r.blocks = blocks;
  EXPECT_THROW(be_->kv_write(kv.pool, std::span<const SeqRun>(&r, 1), k.data(), v.data()), Error);
  const std::vector<int32_t> outside = {5};
  r.pos0 = 0;
  r.blocks = outside;
  EXPECT_THROW(be_->attention(q.data(), kv.pool, std::span<const SeqRun>(&r, 1), 4, 1.0f, out.data(), 0), Error);
}

// The pool layout state_pools.h documents (keys dim-major per block, values one row per
// position), as kv_write stores it: another backend (or a debugger) can read it by those offsets.
TEST_P(StateKernelsTest, KvWriteStoresTheDocumentedLayout) {
  const int64_t G = 3, hd = 5, bt = 4;
  TestKv kv(DType::F32, 3, bt, G, hd);
  const std::vector<int32_t> blocks = {2, 0};  // positions 0-3 in block 2, 4-7 in block 0
  SeqRun r;
  r.n_rows = 6;
  r.blocks = blocks;
  const auto k = randn(static_cast<size_t>(r.n_rows * G * hd), 5), v = randn(k.size(), 6);
  be_->kv_write(kv.pool, std::span<const SeqRun>(&r, 1), k.data(), v.data());
  for (int64_t p = 0; p < r.n_rows; ++p)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t d = 0; d < hd; ++d) {
        const int64_t b = blocks[static_cast<size_t>(p / bt)], t = p % bt;
        float kf, vf;
        std::memcpy(&kf, kv.k.data() + kv.pool.key_elem_offset(b, g, d, t), 4);
        std::memcpy(&vf, kv.v.data() + kv.pool.value_row_offset(b, g, t) + static_cast<size_t>(d) * 4, 4);
        ASSERT_EQ(kf, k[static_cast<size_t>((p * G + g) * hd + d)]) << "key pos " << p << " head " << g << " dim " << d;
        ASSERT_EQ(vf, v[static_cast<size_t>((p * G + g) * hd + d)]) << "value pos " << p << " head " << g << " dim " << d;
      }
  // Dimension d of a key sits block_tokens values after dimension d - 1.
  EXPECT_EQ(kv.pool.key_elem_offset(1, 2, 3, 1) - kv.pool.key_elem_offset(1, 2, 2, 1), static_cast<size_t>(bt) * 4);
}

// ---- short conv ----

struct TestConv {
  TestConv(DType type, int64_t slots, int64_t snaps, int64_t K, int64_t d) {
    pool.type = type;
    pool.n_slots = slots;
    pool.n_snapshots = snaps;
    pool.rows = K - 1;
    pool.dim = d;
    state.assign(pool.slot_bytes() * static_cast<size_t>(slots), 0);
    snapshots.assign(pool.slot_bytes() * static_cast<size_t>(std::max<int64_t>(snaps, 1)), 0xEE);
    pool.state = state.data();
    pool.snapshots = snapshots.data();
  }
  std::vector<float> slot(int64_t i) const { return load(state.data() + i * pool.slot_bytes()); }
  std::vector<float> snapshot(int64_t i) const { return load(snapshots.data() + i * pool.slot_bytes()); }
  std::vector<float> load(const uint8_t* p) const {
    std::vector<float> out(static_cast<size_t>(pool.rows * pool.dim));
    load_state_row(pool.type, p, out.data(), pool.rows * pool.dim);
    return out;
  }
  ConvPool pool;
  std::vector<uint8_t> state, snapshots;
};

// LFM2_SPEC.md §3.4 worked example: d=2, K=3, the conv part fed with u = B ⊙ x.
TEST_P(StateKernelsTest, ShortConvSpecExample) {
  const std::vector<float> w = {0.25f, -1, 2, 0.5f, 0.5f, 1};  // [d][K], last tap = newest
  const std::vector<float> u = {2, 4, 8, -2, 0, 18, 2, 0};     // u_0..u_3
  const std::vector<float> z_want = {4, 4, 14, 0, -7.5f, 19, 6, 8};
  TestConv c(DType::F32, 1, 0, 3, 2);
  std::vector<float> z(8);
  SeqRun r;
  r.n_rows = 4;
  be_->short_conv(u.data(), c.pool, std::span<const SeqRun>(&r, 1), 3, w.data(), nullptr, z.data());
  EXPECT_EQ(z, z_want);
  EXPECT_EQ(c.slot(0), (std::vector<float>{0, 18, 2, 0}));
  // The same sequence one step at a time gives the same outputs and state.
  TestConv c2(DType::F32, 1, 0, 3, 2);
  std::vector<float> z2(8);
  for (int t = 0; t < 4; ++t) {
    SeqRun one;
    one.n_rows = 1;
    one.pos0 = t;
    be_->short_conv(u.data() + 2 * t, c2.pool, std::span<const SeqRun>(&one, 1), 3, w.data(), nullptr, z2.data() + 2 * t);
  }
  EXPECT_EQ(z2, z_want);
  EXPECT_EQ(c2.slot(0), c.slot(0));
}

TEST_P(StateKernelsTest, ShortConvMatchesDenseAcrossTypesChunksSlotsAndCheckpoints) {
  const int64_t d = 13, K = 4, n = 11;
  const auto w = randn(d * K, 12), b = randn(d, 13);
  for (DType type : kTypes) {
    const auto u0 = randn(n * d, 11), u1 = randn(n * d, 21);
    // Dense reference on the rounded inputs, for sequence 0.
    const auto ur = rounded(type, u0);
    std::vector<double> want(static_cast<size_t>(n * d));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < d; ++c) {
        double z = b[c];
        for (int64_t k = 0; k < K; ++k) {
          const int64_t src = t - (K - 1) + k;
          if (src >= 0) z += double(w[c * K + k]) * ur[src * d + c];
        }
        want[t * d + c] = z;
      }
    std::vector<std::vector<float>> first_z;
    for (const std::vector<int64_t>& chunks : {std::vector<int64_t>{11}, {1, 2, 5, 3}, {4, 7}}) {
      // Two sequences in slots 2 and 0 of a 3-slot pool, packed together each step; sequence 0
      // checkpoints after positions 3 and 7 into snapshots 1 and 0.
      TestConv conv(type, 3, 2, K, d);
      std::vector<float> z0(static_cast<size_t>(n * d)), z1(static_cast<size_t>(n * d));
      int64_t pos = 0;
      for (int64_t len : chunks) {
        std::vector<float> u(u0.begin() + pos * d, u0.begin() + (pos + len) * d);
        u.insert(u.end(), u1.begin() + pos * d, u1.begin() + (pos + len) * d);
        std::vector<ConvCheckpoint> cks;
        for (const ConvCheckpoint c : {ConvCheckpoint{3, 1}, ConvCheckpoint{7, 0}})
          if (c.pos >= pos && c.pos < pos + len) cks.push_back(c);
        SeqRun runs[2];
        runs[0].row0 = 0;
        runs[0].n_rows = len;
        runs[0].pos0 = pos;
        runs[0].conv_slot = 2;
        runs[0].checkpoints = cks;
        runs[1].row0 = len;
        runs[1].n_rows = len;
        runs[1].pos0 = pos;
        runs[1].conv_slot = 0;
        std::vector<float> z(static_cast<size_t>(2 * len * d));
        be_->short_conv(u.data(), conv.pool, runs, K, w.data(), b.data(), z.data());
        std::copy_n(z.begin(), len * d, z0.begin() + pos * d);
        std::copy_n(z.begin() + len * d, len * d, z1.begin() + pos * d);
        pos += len;
      }
      for (int64_t i = 0; i < n * d; ++i) ASSERT_NEAR(z0[i], want[i], 1e-5) << dtype_name(type) << " " << i;
      if (first_z.empty()) first_z.push_back(z0);
      EXPECT_EQ(z0, first_z[0]) << dtype_name(type) << ": chunking changed the outputs";
      // The final state is the last K-1 rounded inputs; snapshots hold the state after 3 and 7.
      auto window = [&](int64_t after) {
        return std::vector<float>(ur.begin() + (after + 1 - (K - 1)) * d, ur.begin() + (after + 1) * d);
      };
      EXPECT_EQ(conv.slot(2), window(n - 1)) << dtype_name(type);
      EXPECT_EQ(conv.snapshot(1), window(3)) << dtype_name(type);
      EXPECT_EQ(conv.snapshot(0), window(7)) << dtype_name(type);
      EXPECT_EQ(conv.slot(1), std::vector<float>(static_cast<size_t>((K - 1) * d), 0.0f)) << "an unused slot changed";
    }
  }
}

// Widths with whole vectors, several channel chunks and a ragged last one (the SIMD backends
// split channels into tasks), three runs of different lengths with checkpoints, one step and a
// prompt: outputs, states and snapshots bitwise the reference backend's. Bad checkpoints and
// slots are refused before anything runs.
TEST_P(StateKernelsTest, ShortConvIsBitwiseTheReference) {
  ReferenceBackend ref(pool_);
  for (DType type : kTypes)
    for (auto [d, K] : {std::pair<int64_t, int64_t>{300, 3}, {2048, 3}, {37, 4}, {16, 1}}) {
      const auto w = randn(d * K, 30 + d), b = randn(d, 31);
      const int64_t lens[3] = {1, 9, 4};
      const auto u = randn(14 * d, 32 + K);
      TestConv mine(type, 3, 3, K, d), theirs(type, 3, 3, K, d);
      for (TestConv* c : {&mine, &theirs}) {  // some history in every slot
        const auto h = randn((K - 1) * 3 * d, 33);
        store_state_row(type, h.data(), c->state.data(), (K - 1) * 3 * d);
      }
      const std::vector<ConvCheckpoint> cks1 = {{5, 2}, {5, 0}, {8, 1}};
      SeqRun runs[3];
      int64_t row = 0;
      for (int i = 0; i < 3; ++i) {
        runs[i].row0 = row;
        runs[i].n_rows = lens[i];
        runs[i].pos0 = 3 * i;
        runs[i].conv_slot = (i + 1) % 3;
        row += lens[i];
      }
      runs[1].pos0 = 1;  // checkpoints after positions 5 and 8 of positions 1..9
      runs[1].checkpoints = cks1;
      std::vector<float> za(row * d), zb(row * d);
      be_->short_conv(u.data(), mine.pool, runs, K, w.data(), d % 2 ? nullptr : b.data(), za.data());
      ref.short_conv(u.data(), theirs.pool, runs, K, w.data(), d % 2 ? nullptr : b.data(), zb.data());
      const std::string what = std::string(dtype_name(type)) + " d " + std::to_string(d) + " K " + std::to_string(K);
      ASSERT_EQ(std::memcmp(za.data(), zb.data(), za.size() * 4), 0) << what;
      EXPECT_EQ(mine.state, theirs.state) << what;
      EXPECT_EQ(mine.snapshots, theirs.snapshots) << what;
      // Checkpoints out of the pool, outside the run or out of order; a slot outside the pool.
      for (const std::vector<ConvCheckpoint>& bad : {std::vector<ConvCheckpoint>{{5, 3}}, {{10, 0}}, {{8, 0}, {5, 1}}}) {
        runs[1].checkpoints = bad;
        EXPECT_THROW(be_->short_conv(u.data(), mine.pool, runs, K, w.data(), nullptr, za.data()), Error) << what;
      }
      runs[1].checkpoints = {};
      runs[2].conv_slot = 3;
      EXPECT_THROW(be_->short_conv(u.data(), mine.pool, runs, K, w.data(), nullptr, za.data()), Error) << what;
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, StateKernelsTest, ::testing::ValuesIn(test::all_isas()));

TEST(StatePoolsTest, StorageConversionsRoundOnce) {
  const auto x = randn(33, 5, 100.0f);
  for (DType t : kTypes) {
    std::vector<uint8_t> buf(33 * 4);
    std::vector<float> back(33);
    store_state_row(t, x.data(), buf.data(), 33);
    load_state_row(t, buf.data(), back.data(), 33);
    EXPECT_EQ(back, rounded(t, x)) << dtype_name(t);
    EXPECT_EQ(rounded(t, back), back) << dtype_name(t) << ": rounding twice must change nothing";
  }
  EXPECT_THROW(store_state_row(DType::Q8_0, x.data(), nullptr, 32), Error);
  EXPECT_FALSE(is_state_type(DType::Q4_K));
}

}  // namespace
}  // namespace lfm
