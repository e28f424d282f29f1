// Kernel micro-benchmarks: matmul for each weight type at decode (n = 1) and prefill (n = 128)
// sizes of LFM2-1.2B's FFN w1 (8192 × 2048; from memory also its w2, 2048 × 8192, and an 8B-A1B
// expert's w1, 1792 × 2048; the plain types' prefill GEMM also at n = 512 on w1's and w2's
// shapes), on every instruction-set level the CPU has
// (generic = the portable reference), plus paged attention at a few depths and the plain read
// that bounds a decode from memory.
// Run: build/bench/lfm_microbench --benchmark_filter='Matmul|ReadCold'
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <tuple>

#include "convert/quant.h"
#include "core/thread_pool.h"
#include "core/aligned_buffer.h"
#include "kernels/cpu_backend.h"
#include "kernels/cpu/simd_backends.h"
#include "kernels/state_pools.h"
#include "kernels/weight_pack.h"

namespace {

using namespace lfm;

std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

ThreadPool& pool() {
  static ThreadPool p(0);
  return p;
}

struct Weight {
  std::vector<uint8_t> bytes;
  TensorView view;
  AlignedBuffer packed;
};

// The layout the SIMD backends read for a weight of type dt multiplying `act` activations:
// 16-row panels for the quantized types, BF16 column pairs where pairs16_selected says so,
// 32-column chunks for the other plain types.
PackedLayout bench_layout(DType dt, DType act) {
  if (!plain_matrix_type(dt)) return PackedLayout::kRows16;
  return pairs16_selected(dt, act) ? PackedLayout::kPairs16 : PackedLayout::kChunks16;
}

// packed: with the copy the model makes at load (kernels/weight_pack.h). act: the input
// rounding (TensorView::act_type; BF16 only for BF16 weights).
const Weight& weight(DType dt, int64_t out, int64_t in, bool packed, DType act) {
  static std::map<std::tuple<int, int64_t, int64_t, bool, int>, Weight> cache;
  auto& w = cache[{static_cast<int>(dt), out, in, packed, static_cast<int>(act)}];
  if (w.bytes.empty()) {
    const auto f = randn(static_cast<size_t>(out * in), 1);
    const size_t row = dtype_row_bytes(dt, in);
    w.bytes.resize(row * static_cast<size_t>(out));
    for (int64_t r = 0; r < out; ++r) quantize_row(dt, f.data() + r * in, w.bytes.data() + r * row, in);
    w.view = TensorView{dt, {out, in}, w.bytes.data(), w.bytes.size()};
    w.view.act_type = act;
    if (packed) {
      const PackedLayout layout = bench_layout(dt, act);
      w.packed = pack_weight(layout, w.view);
      w.view.packed = w.packed.data();
      w.view.packed_layout = layout;
    }
  }
  return w;
}

// packed: kRows16 (quantized), kChunks16 (F32/F16/BF16) or, with AMX (or bf16 activations and
// AVX-512 BF16), kPairs16 (BF16).
// cold (packed weights only): the packed matrix copied end to end into a buffer of more than
// 1 GiB (huge pages, like the model's) and a different copy read each iteration, so the weights
// come from memory as in a model's decode.
void BM_Matmul(benchmark::State& state, Isa isa, DType dt, DType act, int64_t n, bool packed, bool cold, int64_t out,
               int64_t in) {
  if (!isa_supported(isa)) {
    state.SkipWithError("CPU lacks this instruction set");
    return;
  }
  auto be = make_backend_for(isa, pool());
  const Weight& w = weight(dt, out, in, packed, act);
  const auto x = randn(static_cast<size_t>(n * in), 2);
  std::vector<float> y(static_cast<size_t>(n * out));
  TensorView view = w.view;
  const size_t bytes = cold ? packed_size(view.packed_layout, w.view) : 0;
  const size_t copies = cold ? (size_t{1} << 30) / bytes + 1 : 0;
  AlignedBuffer many(bytes * copies);
  for (size_t c = 0; c < copies; ++c) std::memcpy(static_cast<uint8_t*>(many.data()) + c * bytes, w.packed.data(), bytes);
  size_t copy = 0;
  for (auto _ : state) {
    if (cold) {
      view.packed = static_cast<const uint8_t*>(many.data()) + copy * bytes;
      copy = (copy + 1) % copies;
    }
    be->matmul(x.data(), n, view, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.bytes.size()), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * out * in) / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// Attention of `rows` query rows after `depth` cached positions, LFM2-1.2B's heads (32 query, 8
// KV, head_dim 64), f16 K/V in 16-token blocks; GB/s counts the K and V bytes read. Warm: one
// pool whose block table is scattered, re-read every iteration (it stays in the caches that fit
// it). Cold: blocks in order (as a fresh sequence gets them) in copies that add up to over 1 GiB,
// read in turn, so every read comes from memory as in a model's decode, where the weights
// streaming past evict the KV between layers.
void BM_Attention(benchmark::State& state, Isa isa, int64_t depth, int64_t rows, bool cold) {
  if (!isa_supported(isa)) {
    state.SkipWithError("CPU lacks this instruction set");
    return;
  }
  auto be = make_backend_for(isa, pool());
  const int64_t heads = 32, kv_heads = 8, hd = 64, bt = 16, n_keys = depth + rows;
  const int64_t n_blocks = (n_keys + bt - 1) / bt;
  KvPool kv{nullptr, nullptr, DType::F16, n_blocks, bt, kv_heads, hd};
  const size_t bytes = static_cast<size_t>(n_blocks * bt) * kv.token_bytes();
  const size_t copies = cold ? (size_t{1} << 30) / (2 * bytes) + 1 : 1;
  AlignedBuffer k(bytes * copies), v(bytes * copies);  // huge pages, as the model's KV pools
  const auto kf = randn(static_cast<size_t>(n_blocks * bt * kv_heads * hd), 3);
  for (size_t c = 0; c < copies; ++c) {
    store_state_row(DType::F16, kf.data(), static_cast<uint8_t*>(k.data()) + c * bytes, static_cast<int64_t>(kf.size()));
    store_state_row(DType::F16, kf.data(), static_cast<uint8_t*>(v.data()) + c * bytes, static_cast<int64_t>(kf.size()));
  }
  std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b) blocks[static_cast<size_t>(b)] = static_cast<int32_t>(cold ? b : (b * 7) % n_blocks);
  const SeqRun run{0, rows, depth, blocks, 0, {}};
  const auto q = randn(static_cast<size_t>(rows * heads * hd), 4);
  std::vector<float> out(q.size());
  size_t copy = 0;
  for (auto _ : state) {
    kv.k = static_cast<uint8_t*>(k.data()) + copy * bytes;
    kv.v = static_cast<uint8_t*>(v.data()) + copy * bytes;
    copy = (copy + 1) % copies;
    be->attention(q.data(), kv, std::span<const SeqRun>(&run, 1), heads, 0.125f, out.data(), 0);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(2.0 * static_cast<double>(n_keys) * static_cast<double>(kv.token_bytes()),
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// The pure read that bounds a cold decode GEMV: `bytes` from memory (a different copy of a
// ring of more than 1 GiB each iteration, as Matmul/.../cold reads its weights), split over the
// pool's threads in 16 KiB pieces, by the read loop of `lfm bench`'s ceiling for that level with
// its line requested `prefetch` bytes ahead. A cold matmul's GB/s over this one's is its share
// of what the memory gives a reader in the same conditions.
void BM_ReadCold(benchmark::State& state, Isa isa, int64_t bytes, size_t prefetch) {
  if (!isa_supported(isa)) {
    state.SkipWithError("CPU lacks this instruction set");
    return;
  }
  const auto read = isa == Isa::kAvx512 ? stream_read_avx512 : stream_read_avx2;
  const size_t n = static_cast<size_t>(bytes), copies = (size_t{1} << 30) / n + 1;
  AlignedBuffer many(n * copies);
  std::memset(many.data(), 1, n * copies);
  constexpr int64_t kPiece = 16 * 1024;
  size_t copy = 0;
  std::atomic<uint32_t> sink{0};
  for (auto _ : state) {
    const uint8_t* p = static_cast<const uint8_t*>(many.data()) + copy * n;
    copy = (copy + 1) % copies;
    pool().parallel_for(bytes / kPiece, 1, [&](int64_t b, int64_t e) {
      const float v = read(p + b * kPiece, static_cast<size_t>((e - b) * kPiece), prefetch);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      sink.fetch_xor(bits, std::memory_order_relaxed);
    });
  }
  benchmark::DoNotOptimize(sink.load());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

void register_all() {
  // The sizes of the 8192 × 2048 Q4_0 and BF16 matrices below.
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    for (int64_t mib : {9, 32})
      for (size_t prefetch : {0, 1024}) {
        const std::string name = std::string("ReadCold/") + isa_name(isa) + "/" + std::to_string(mib) + "MiB/pf" + std::to_string(prefetch);
        benchmark::RegisterBenchmark(name.c_str(), BM_ReadCold, isa, mib << 20, prefetch)->UseRealTime()->Unit(benchmark::kMillisecond);
      }
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512})
    for (int64_t depth : {512, 8192, 32768})
      for (int64_t rows : {1, 16})
        for (bool cold : {false, true}) {
          if (cold && (rows != 1 || depth < 8192)) continue;  // decode at depth: the memory-bound case
          const std::string name = std::string("Attention/") + isa_name(isa) + "/d" + std::to_string(depth) + "/rows" +
                                   std::to_string(rows) + (cold ? "/cold" : "");
          benchmark::RegisterBenchmark(name.c_str(), BM_Attention, isa, depth, rows, cold)->UseRealTime()->Unit(benchmark::kMillisecond);
        }
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512})
    for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                     DType::Q4_K, DType::Q5_K, DType::Q6_K})
      for (DType act : {DType::F32, DType::BF16})
      for (int64_t n : {1, 128})
        for (bool packed : {false, true}) {
          // The SIMD backends read the 16-row panels of the quantized types and the 32-column chunks
          // of the plain ones; AVX-512 with AMX (or AVX-512 BF16 and bf16 activations) the BF16 pairs.
          const bool plain = plain_matrix_type(dt);
          if (act == DType::BF16 && dt != DType::BF16) continue;
          if (packed && (isa == Isa::kGeneric || !(rows16_packable(dt) || plain))) continue;
          if (packed && bench_layout(dt, act) == PackedLayout::kPairs16 && isa != Isa::kAvx512) continue;
          const std::string name = std::string("Matmul/") + isa_name(isa) + "/" + dtype_name(dt) +
                                   (act == DType::BF16 ? "-bf16act" : "") + (packed ? "-packed" : "") + "/n" + std::to_string(n);
          // One registration: `tokens` rows of input against an out × in matrix, warm or from memory.
          const auto add = [&](const std::string& label, int64_t tokens, bool cold, int64_t out, int64_t in) {
            benchmark::RegisterBenchmark(label.c_str(), BM_Matmul, isa, dt, act, tokens, packed, cold, out, in)
                ->UseRealTime()->Unit(benchmark::kMillisecond);
          };
          add(name, n, false, 8192, 2048);
          if (packed && plain && n == 128) {  // a 512-token prefill's GEMM: the FFN's w1/w3 shape, then w2's (rows of 8192)
            const std::string n512 = name.substr(0, name.rfind('/')) + "/n512";
            add(n512, 512, false, 8192, 2048);
            add(n512 + "/in8192", 512, false, 2048, 8192);
          }
          if (packed && plain && n == 1)  // a speculative verification's few tokens, weights from memory
            for (int64_t few : {2, 3, 4, 5, 6, 8, 9, 12, 16}) { add(name.substr(0, name.rfind('/')) + "/n" + std::to_string(few) + "/cold", few, true, 8192, 2048); add(name.substr(0, name.rfind('/')) + "/n" + std::to_string(few), few, false, 8192, 2048); }
          if (packed && n == 1) {  // decode from memory: w1's shape, w2's (rows of 8192), an 8B-A1B expert's w1 (1792 rows)
            add(name + "/cold", n, true, 8192, 2048);
            add(name + "/cold/in8192", n, true, 2048, 8192);
            add(name + "/cold/rows1792", n, true, 1792, 2048);
          }
        }
}

const bool registered = (register_all(), true);

}  // namespace
