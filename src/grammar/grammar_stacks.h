// The pushdown matcher's state: a set of stacks of grammar positions, each stack a chain of
// interned frames (identical stacks share one id, so a set of stacks is a sorted id list).
// A frame holds the position of the next element to match in its alternative and its parent
// frame (where to continue when the alternative ends). A rule reference that ends an
// alternative does not keep a return frame (tail call), so repetition (right recursion) keeps
// the stack's depth constant.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace lfm::grammar {

// Parents with no frame: the root's end (the text may end here) and, for the mask cache's
// context-free analysis of one frame, the unknown frames below it.
constexpr int32_t kRootParent = -1;
constexpr int32_t kBottom = -2;

// Stacks whose top element is a byte set or a special token (the closure of a state), plus
// whether some path ended the root (accept) or popped past a kBottom frame (bottom).
struct Tops {
  std::vector<int32_t> stacks;  // sorted frame ids
  bool accept = false;
  bool bottom = false;
  bool empty() const { return stacks.empty() && !accept && !bottom; }
  bool operator==(const Tops&) const = default;
};

class StackStore {
 public:
  struct Frame {
    int32_t pos;     // index into Grammar::elements
    int32_t parent;  // frame id, kRootParent or kBottom
  };

  // Bounds on an ambiguous grammar's state (nested repetition the builder could not fold, e.g.
  // (a | a a)*): a closure past kMaxClosure frames, or more than kMaxFrames frames in all, is an
  // lfm::Error naming the grammar as too ambiguous rather than a step that never ends.
  static constexpr size_t kMaxClosure = 100000;
  static constexpr size_t kMaxFrames = size_t{1} << 22;

  explicit StackStore(const Grammar& g) : g_(g) {}

  int32_t frame(int32_t pos, int32_t parent);
  const Frame& operator[](int32_t id) const { return frames_[static_cast<size_t>(id)]; }
  size_t size() const { return frames_.size(); }
  const Grammar& grammar() const { return g_; }

  // The closure of the root's start.
  Tops start();
  // The closure of a single frame (its alternative continues at frame's position).
  Tops closure_of(int32_t frame_id);
  // The state after one byte / one special token (token_texts index); empty() when none.
  void advance(const Tops& in, uint8_t byte, Tops& out);
  void advance_token(const Tops& in, int32_t token, Tops& out);

 private:
  void begin(Tops& out);
  void push(int32_t frame_id);  // onto the closure's work list, once per closure
  void run(Tops& out);          // the closure of the work list
  void push_parent(int32_t parent, Tops& out);

  const Grammar& g_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> index_;
  std::vector<uint32_t> seen_;  // closure generation per frame
  uint32_t gen_ = 0;
  std::vector<int32_t> work_;
  size_t closure_size_ = 0;
};

}  // namespace lfm::grammar
