// Backend::attention with a sliding window (key j visible to the query at p when p − w < j ≤ p;
// LFM2.5-Audio's detokenizer, window 30) on every backend (the reference, each SIMD level the CPU
// has, the fake device with and without replay, the CUDA backend on its emulator) against plain
// float64 loops written here: awkward head sizes and block sizes, windows of 1, shorter than a
// chunk, longer than the context and crossing the CUDA kernel's 256-key splits, several
// sequences per step, whole prefill, chunked prefill and one-token decode across the window's edge.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cache/state_cache.h"
#include "core/thread_pool.h"
#include "kernels/cpu_backend.h"
#include "test_backends.h"
#include "test_util.h"

namespace lfm {
namespace {

using test::randn;

struct Seq {
  int64_t n;
  std::vector<float> q, k, v;  // [n, H, hd], [n, G, hd], [n, G, hd]
};

// Query i of s over keys max(0, i − w + 1) .. i (all of 0 .. i when w = 0), K/V rounded to `type`.
std::vector<double> dense(const Seq& s, DType type, int64_t i, int64_t H, int64_t G, int64_t hd, float scale,
                          int64_t w) {
  std::vector<float> k = s.k, v = s.v;
  round_to_state_type(type, k.data(), static_cast<int64_t>(k.size()));
  round_to_state_type(type, v.data(), static_cast<int64_t>(v.size()));
  const int64_t first = w > 0 ? std::max<int64_t>(0, i - w + 1) : 0;
  std::vector<double> out(static_cast<size_t>(H * hd));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / G);
    std::vector<double> sc;
    for (int64_t j = first; j <= i; ++j) {
      double d = 0;
      for (int64_t e = 0; e < hd; ++e) d += double(s.q[(i * H + h) * hd + e]) * k[(j * G + g) * hd + e];
      sc.push_back(d * scale);
    }
    const double mx = *std::max_element(sc.begin(), sc.end());
    double z = 0;
    for (double& e : sc) z += (e = std::exp(e - mx));
    for (int64_t e = 0; e < hd; ++e) {
      double o = 0;
      for (size_t j = 0; j < sc.size(); ++j) o += sc[j] / z * v[((first + static_cast<int64_t>(j)) * G + g) * hd + e];
      out[h * hd + e] = o;
    }
  }
  return out;
}

class SlidingAttentionTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& name = GetParam();
    if (name == "fake-device" || name == "fake-device-replay" || name == "cuda-emu" || name == "cuda") {
      std::string why;
      LoadOptions load;
      be_ = test::make_named_backend(name, pool_, load, &why);
      if (!be_) GTEST_SKIP() << why;
    } else {
      if (!isa_supported(parse_isa(name))) GTEST_SKIP() << "CPU lacks " << name;
      be_ = make_backend_for(parse_isa(name), pool_);
    }
  }

  // Feeds the sequences through kv_write + attention in steps (step t: chunks[t] tokens of every
  // unfinished sequence, the last chunk repeated), through a state cache in the backend's memory.
  // Returns each sequence's outputs [n, H, hd].
  std::vector<std::vector<float>> run(std::vector<Seq>& seqs, const std::vector<int64_t>& chunks, DType type,
                                      int64_t block_tokens, int64_t H, int64_t G, int64_t hd, float scale, int64_t w) {
    StateShape shape;
    shape.attn_layers = 1, shape.kv_heads = G, shape.head_dim = hd;
    StateCacheOptions opt;
    opt.block_tokens = block_tokens, opt.type = type, opt.prefix_cache = false;
    opt.n_slots = static_cast<int64_t>(seqs.size());
    for (const Seq& s : seqs) opt.n_blocks += (s.n + block_tokens - 1) / block_tokens;
    StateCache cache(shape, opt, *be_);
    std::vector<Sequence*> handles;
    for (const Seq& s : seqs) handles.push_back(cache.open(s.n));
    std::vector<std::vector<float>> outs(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) outs[i].resize(static_cast<size_t>(seqs[i].n * H * hd));
    for (size_t step = 0;; ++step) {
      const int64_t chunk = chunks[std::min(step, chunks.size() - 1)];
      std::vector<SeqRun> runs;
      std::vector<float> q, k, v;
      std::vector<size_t> who;
      int64_t rows = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        const int64_t done = handles[i]->n_past(), n = std::min(chunk, seqs[i].n - done);
        if (n <= 0) continue;
        EXPECT_TRUE(cache.reserve(*handles[i], n));
        runs.push_back(cache.run(*handles[i], rows, n));
        const Seq& s = seqs[i];
        q.insert(q.end(), s.q.begin() + done * H * hd, s.q.begin() + (done + n) * H * hd);
        k.insert(k.end(), s.k.begin() + done * G * hd, s.k.begin() + (done + n) * G * hd);
        v.insert(v.end(), s.v.begin() + done * G * hd, s.v.begin() + (done + n) * G * hd);
        who.push_back(i);
        rows += n;
      }
      if (runs.empty()) break;
      DeviceBuffer dq = be_->allocate(q.size() * 4), dk = be_->allocate(k.size() * 4), dv = be_->allocate(v.size() * 4);
      DeviceBuffer dout = be_->allocate(q.size() * 4);
      be_->upload(dq.data(), q.data(), q.size() * 4);
      be_->upload(dk.data(), k.data(), k.size() * 4);
      be_->upload(dv.data(), v.data(), v.size() * 4);
      be_->begin_step(runs);
      be_->kv_write(cache.kv_pool(0), runs, dk.as<float>(), dv.as<float>());
      be_->attention(dq.as<float>(), cache.kv_pool(0), runs, H, scale, dout.as<float>(), w);
      std::vector<float> out(q.size());
      be_->download(out.data(), dout.data(), out.size() * 4);
      for (size_t r = 0; r < runs.size(); ++r) {
        const size_t i = who[r];
        const int64_t done = handles[i]->n_past();
        std::copy_n(out.begin() + runs[r].row0 * H * hd, runs[r].n_rows * H * hd, outs[i].begin() + done * H * hd);
        cache.commit(*handles[i], std::vector<int32_t>(static_cast<size_t>(runs[r].n_rows), 0));
      }
    }
    for (Sequence* s : handles) cache.close(s);
    return outs;
  }

  ThreadPool pool_{3};
  std::unique_ptr<Backend> be_;
};

TEST_P(SlidingAttentionTest, PagedAttentionMatchesPlainLoops) {
  struct Case {
    int64_t H, G, hd, block_tokens;
    std::vector<int64_t> lens;
  };
  // hd 64 is a fast-path size of the SIMD backends (which must still take the window), 6 and 40
  // are not; 300 keys cross the CUDA kernel's 256-key split, with windows inside and across it.
  const Case cases[] = {{4, 2, 6, 5, {37, 9}}, {8, 2, 64, 16, {300, 41}}, {2, 1, 40, 7, {270}}};
  // Whole prefill; chunks of 7; a prefill past the window then decode steps across its edge.
  const std::vector<std::vector<int64_t>> schedules = {{1000}, {7}, {29, 1}, {250, 1}};
  int checked = 0;
  for (const Case& c : cases)
    for (DType type : {DType::F32, DType::BF16})
      for (int64_t w : {1, 5, 30, 300})
        for (const auto& chunks : schedules) {
          if (type == DType::BF16 && (chunks.size() != 1 || w == 300)) continue;  // keep the emulator's share small
          if (chunks == std::vector<int64_t>{250, 1} && c.lens[0] < 250) continue;
          std::vector<Seq> seqs;
          uint64_t seed = 100 * static_cast<uint64_t>(c.hd + w);
          for (int64_t n : c.lens) {
            Seq s{n, randn(static_cast<size_t>(n * c.H * c.hd), ++seed), randn(static_cast<size_t>(n * c.G * c.hd), ++seed),
                  randn(static_cast<size_t>(n * c.G * c.hd), ++seed)};
            seqs.push_back(std::move(s));
          }
          const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
          const auto outs = run(seqs, chunks, type, c.block_tokens, c.H, c.G, c.hd, scale, w);
          for (size_t si = 0; si < seqs.size(); ++si)
            for (int64_t i = 0; i < seqs[si].n; ++i) {
              const auto want = dense(seqs[si], type, i, c.H, c.G, c.hd, scale, w);
              double worst = 0;
              for (size_t e = 0; e < want.size(); ++e)
                worst = std::max(worst, std::fabs(outs[si][static_cast<size_t>(i * c.H * c.hd) + e] - want[e]));
              ASSERT_LT(worst, 2e-5) << "hd " << c.hd << " window " << w << " type " << dtype_name(type) << " chunk "
                                     << chunks[0] << " sequence " << si << " row " << i;
              ++checked;
            }
        }
  EXPECT_GT(checked, 3000);
}

// Whole causal attention (no window) in long prefill steps, which the CUDA backend runs on the
// tensor cores (its kernel for 64+ rows, tiles 4+ rows full): query heads per KV head 1, 3, 4
// and 8 (a block takes 64 / G rows: 64, 21, 16, 8), head sizes that fill the mma's tiles (64,
// 128) and one that is padded (40), every state type (F32 keys in three tf32 terms, F16/BF16 in
// two), contexts of two 256-key splits, then decode steps (the CUDA-core kernel) on the same cache.
TEST_P(SlidingAttentionTest, LongCausalPrefillsMatchPlainLoops) {
  struct Case {
    int64_t H, G, hd, block_tokens;
    std::vector<int64_t> lens;
  };
  const Case cases[] = {{16, 4, 64, 16, {300, 400}}, {8, 1, 128, 8, {270}}, {6, 6, 40, 5, {100}}, {6, 2, 64, 16, {100}}};
  // {290, 1, 100}: the first case's third step holds the first sequence's last 9 rows (a tile of
  // 8 and a tile of one row with 300 keys) beside the other's 100-row chunk.
  const std::vector<std::vector<int64_t>> schedules = {{1000}, {96}, {250, 1}, {290, 1, 100}};
  int checked = 0;
  for (const Case& c : cases)
    for (DType type : {DType::F32, DType::F16, DType::BF16})
      for (const auto& chunks : schedules) {
        if (type != DType::F32 && chunks.size() != 1) continue;  // keep the emulator's share small
        if (chunks.size() == 3 && c.lens.size() == 1) continue;
        std::vector<Seq> seqs;
        uint64_t seed = 7 * static_cast<uint64_t>(c.hd + c.H);
        for (int64_t n : c.lens) {
          Seq s{n, randn(static_cast<size_t>(n * c.H * c.hd), ++seed), randn(static_cast<size_t>(n * c.G * c.hd), ++seed),
                randn(static_cast<size_t>(n * c.G * c.hd), ++seed)};
          seqs.push_back(std::move(s));
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
        const auto outs = run(seqs, chunks, type, c.block_tokens, c.H, c.G, c.hd, scale, 0);
        for (size_t si = 0; si < seqs.size(); ++si)
          for (int64_t i = 0; i < seqs[si].n; i += 7) {
            const auto want = dense(seqs[si], type, i, c.H, c.G, c.hd, scale, 0);
            double worst = 0;
            for (size_t e = 0; e < want.size(); ++e)
              worst = std::max(worst, std::fabs(outs[si][static_cast<size_t>(i * c.H * c.hd) + e] - want[e]));
            ASSERT_LT(worst, 2e-5) << "H " << c.H << " kv heads " << c.G << " hd " << c.hd << " type "
                                   << dtype_name(type) << " chunk " << chunks[0] << " sequence " << si << " row " << i;
            ++checked;
          }
      }
  EXPECT_GT(checked, 500);
}

TEST_P(SlidingAttentionTest, NegativeWindowIsAnError) {
  std::vector<Seq> seqs = {{3, randn(3 * 2 * 8, 1), randn(3 * 8, 2), randn(3 * 8, 3)}};
  try {
    run(seqs, {3}, DType::F32, 4, 2, 1, 8, 1.0f, -2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-2"), std::string::npos) << e.what();
  }
}

std::vector<std::string> backends() {
  std::vector<std::string> out = test::all_isas();
  out.push_back("fake-device");
  out.push_back("fake-device-replay");
#if LFM_HAVE_CUDA_EMU
  out.push_back("cuda-emu");
#endif
#if LFM_HAVE_CUDA
  out.push_back("cuda");  // skipped without a GPU
#endif
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, SlidingAttentionTest, ::testing::ValuesIn(backends()), [](const auto& info) {
  std::string s = info.param;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
});

}  // namespace
}  // namespace lfm
