// The SIMD CPU backends (one per instruction set, each in its own translation unit) and the
// run-time choice between them.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <utility>

#include "kernels/backend.h"
#include "kernels/cpu_features.h"

namespace lfm {

class ThreadPool;

// Callers must check isa_supported() first: these execute AVX2 / AVX-512 instructions.
std::unique_ptr<Backend> make_avx2_backend(ThreadPool& pool);
std::unique_ptr<Backend> make_avx512_backend(ThreadPool& pool);

// Streaming reads of n bytes with the widest loads of each level (memory bandwidth probes).
// n bytes read with the level's widest loads, prefetching `prefetch` bytes ahead (0: none).
float stream_read_avx2(const void* p, size_t n, size_t prefetch);
float stream_read_avx512(const void* p, size_t n, size_t prefetch);

// The backend for an instruction-set level: generic → the plain reference backend.
// Throws lfm::Error when the CPU lacks that level.
std::unique_ptr<Backend> make_backend_for(Isa isa, ThreadPool& pool);

// Read bandwidth of memory already in place (e.g. the mapped weights), in bytes per second:
// every range read once, split across the pool's threads, by each read loop the selected level
// allows (its widest loads and AVX2's, with and without a prefetch ahead), best of `passes`
// each; the fastest counts.
double measure_read_bandwidth(ThreadPool& pool, std::span<const std::pair<const void*, size_t>> ranges,
                              int passes = 3);

}  // namespace lfm
