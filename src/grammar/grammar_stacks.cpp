#include "grammar/grammar_stacks.h"

#include <algorithm>

#include "core/error.h"

namespace lfm::grammar {

int32_t StackStore::frame(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = index_.try_emplace(key, static_cast<int32_t>(frames_.size()));
  if (inserted) {
    LFM_CHECK(frames_.size() < kMaxFrames, "grammar: the matcher's state grew past ", kMaxFrames,
              " stack frames (the grammar is too ambiguous: nested repetition?)");
    frames_.push_back({pos, parent});
    seen_.push_back(0);
  }
  return it->second;
}

void StackStore::begin(Tops& out) {
  out.stacks.clear();
  out.accept = out.bottom = false;
  work_.clear();
  closure_size_ = 0;
  if (++gen_ == 0) {  // wrapped: forget every mark
    std::fill(seen_.begin(), seen_.end(), 0);
    gen_ = 1;
  }
}

void StackStore::push(int32_t id) {
  if (seen_[static_cast<size_t>(id)] == gen_) return;
  seen_[static_cast<size_t>(id)] = gen_;
  LFM_CHECK(++closure_size_ <= kMaxClosure, "grammar: one step reaches more than ", kMaxClosure,
            " parser states (the grammar is too ambiguous: nested repetition such as (a+)+?)");
  work_.push_back(id);
}

void StackStore::push_parent(int32_t parent, Tops& out) {
  if (parent == kRootParent)
    out.accept = true;
  else if (parent == kBottom)
    out.bottom = true;
  else
    push(parent);
}

void StackStore::run(Tops& out) {
  while (!work_.empty()) {
    const int32_t id = work_.back();
    work_.pop_back();
    const Frame f = frames_[static_cast<size_t>(id)];
    const Element& e = g_.elements[static_cast<size_t>(f.pos)];
    switch (e.kind) {
      case Element::Kind::kBytes:
      case Element::Kind::kToken:
        out.stacks.push_back(id);
        break;
      case Element::Kind::kEnd:
        push_parent(f.parent, out);
        break;
      case Element::Kind::kRule: {
        // Tail call: a reference ending its alternative returns straight to the parent.
        const bool tail = g_.elements[static_cast<size_t>(f.pos) + 1].kind == Element::Kind::kEnd;
        const int32_t ret = tail ? f.parent : frame(f.pos + 1, f.parent);
        for (int32_t alt : g_.rule_alts[static_cast<size_t>(e.index)]) {
          if (g_.elements[static_cast<size_t>(alt)].kind == Element::Kind::kEnd) {
            // An empty alternative: continue at the return frame.
            if (ret < 0)
              push_parent(ret, out);
            else
              push(ret);
          } else {
            push(frame(alt, ret));
          }
        }
        break;
      }
    }
  }
  std::sort(out.stacks.begin(), out.stacks.end());
}

Tops StackStore::start() {
  Tops out;
  begin(out);
  for (int32_t alt : g_.rule_alts[static_cast<size_t>(g_.root)]) {
    if (g_.elements[static_cast<size_t>(alt)].kind == Element::Kind::kEnd)
      out.accept = true;
    else
      push(frame(alt, kRootParent));
  }
  run(out);
  return out;
}

Tops StackStore::closure_of(int32_t id) {
  Tops out;
  begin(out);
  push(id);
  run(out);
  return out;
}

void StackStore::advance(const Tops& in, uint8_t byte, Tops& out) {
  begin(out);
  for (int32_t id : in.stacks) {
    const Frame f = frames_[static_cast<size_t>(id)];
    const Element& e = g_.elements[static_cast<size_t>(f.pos)];
    if (e.kind == Element::Kind::kBytes && g_.byte_sets[static_cast<size_t>(e.index)].has(byte))
      push(frame(f.pos + 1, f.parent));
  }
  run(out);
}

void StackStore::advance_token(const Tops& in, int32_t token, Tops& out) {
  begin(out);
  for (int32_t id : in.stacks) {
    const Frame f = frames_[static_cast<size_t>(id)];
    const Element& e = g_.elements[static_cast<size_t>(f.pos)];
    if (e.kind == Element::Kind::kToken && e.index == token) push(frame(f.pos + 1, f.parent));
  }
  run(out);
}

}  // namespace lfm::grammar
