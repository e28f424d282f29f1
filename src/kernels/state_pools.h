// Where a step's sequences keep their recurrent and attention state, as the kernels see it:
// plain descriptors of preallocated pools, and one run per sequence saying which rows of the
// packed batch belong to it and where its state lives. Kernels know nothing of how the pools are
// managed (the cache layer does that) nor of LFM2.
//
// Storage types: float32, float16 or bfloat16 (`type`). Kernels convert on the way in and out and
// always compute in float32. Whatever the type, a value is rounded once when it is stored and every
// later read sees the stored value, including reads in the same step: so splitting a prompt into
// chunks, or batching it with other sequences, never changes a result.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace lfm {

// One attention layer's keys and values, in blocks of `block_tokens` positions; head-major inside
// a block, so one KV head's share of a block is contiguous (block_tokens × head_dim values) and
// attention streams it instead of taking a slice of every token:
//   k [n_blocks, kv_heads, head_dim, block_tokens]: dim-major, a key's values block_tokens apart;
//   v [n_blocks, kv_heads, block_tokens, head_dim]: one value row per position.
// Keys are dim-major because attention takes one dimension of many keys at a time (one vector of
// consecutive positions × one broadcast query element per FMA: the scores come out per position,
// with no horizontal sums), while values are added row by row, scaled by each position's weight.
struct KvPool {
  void* k = nullptr;
  void* v = nullptr;
  DType type = DType::F32;
  int64_t n_blocks = 0;
  int64_t block_tokens = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;

  int64_t token_elems() const { return kv_heads * head_dim; }
  // A state type (F32, F16 or BF16: is_state_type) is 4 or 2 bytes; inline, for address arithmetic in loops.
  size_t elem_bytes() const { return type == DType::F32 ? 4 : 2; }
  size_t token_bytes() const { return static_cast<size_t>(token_elems()) * elem_bytes(); }
  size_t row_bytes() const { return static_cast<size_t>(head_dim) * elem_bytes(); }
  // Byte offset of KV head `head`'s share of block `block` (block_tokens × head_dim values), in k or v.
  size_t head_block_offset(int64_t block, int64_t head) const {
    return static_cast<size_t>((block * kv_heads + head) * block_tokens) * row_bytes();
  }
  // Byte offset in v of KV head `head`'s value row at slot `t` of block `block`.
  size_t value_row_offset(int64_t block, int64_t head, int64_t t) const {
    return head_block_offset(block, head) + static_cast<size_t>(t) * row_bytes();
  }
  // Byte offset in k of dimension `d` of KV head `head`'s key at slot `t` of block `block`.
  size_t key_elem_offset(int64_t block, int64_t head, int64_t d, int64_t t) const {
    return head_block_offset(block, head) + static_cast<size_t>(d * block_tokens + t) * elem_bytes();
  }
};

// One conv layer's rolling states: state [n_slots, rows, dim] (one slot per live sequence, the
// last `rows` = kernel - 1 inputs, oldest first) and snapshots [n_snapshots, rows, dim] (states
// saved at chosen positions, for prefix reuse; none when n_snapshots is 0).
struct ConvPool {
  void* state = nullptr;
  void* snapshots = nullptr;
  DType type = DType::F32;
  int64_t n_slots = 0;
  int64_t n_snapshots = 0;
  int64_t rows = 0;
  int64_t dim = 0;

  size_t slot_bytes() const { return static_cast<size_t>(rows * dim) * dtype_traits(type).block_bytes; }
};

// "After position `pos`, save the rolling state into snapshot `snapshot`."
struct ConvCheckpoint {
  int64_t pos = 0;
  int32_t snapshot = 0;
};

// One sequence's share of a step.
struct SeqRun {
  int64_t row0 = 0;    // first row of the sequence in the packed batch
  int64_t n_rows = 0;  // its new tokens this step
  int64_t pos0 = 0;    // position of its first new token (= tokens already in its state)
  // Block table: position p lives in block blocks[p / block_tokens], at p % block_tokens.
  // Covers at least positions [0, pos0 + n_rows).
  std::span<const int32_t> blocks;
  int32_t conv_slot = 0;                         // its rolling state in every ConvPool
  std::span<const ConvCheckpoint> checkpoints;   // ascending, within [pos0, pos0 + n_rows)
};

// Storage conversions for state pools (F32, F16, BF16): n values.
void store_state_row(DType type, const float* src, void* dst, int64_t n);
void load_state_row(DType type, const void* src, float* dst, int64_t n);
// Rounds n values in place as storing and loading them would.
void round_to_state_type(DType type, float* x, int64_t n);
// Whether a pool may use the type (F32, F16, BF16).
bool is_state_type(DType type);

}  // namespace lfm
