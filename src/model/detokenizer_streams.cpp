// DetokenizerStreams: several streams decoded together, one batched Forward step per push(); each
// stream is a sequence of the shared state cache with its own iSTFT. Because every stage is
// causal and a CPU backend's rows do not depend on the batch or the chunking
// (Backend::bitwise_batch_invariant), a stream's samples are decode()'s bits.
#include <algorithm>

#include "core/error.h"
#include "model/detokenizer_impl.h"

namespace lfm {

struct DetokenizerStreams::Stream {
  bool open = false, finished = false;
  Sequence* seq = nullptr;
  std::unique_ptr<InverseStft> istft;
  int64_t frames = 0;  // taken so far
};

struct DetokenizerStreams::State {
  std::unique_ptr<StateCache> cache;
  std::unique_ptr<Forward> fwd;
  std::vector<Stream> streams;  // [max_streams], by id
  Detokenizer::Impl::Buffers buf;
};

DetokenizerStreams::DetokenizerStreams(const Detokenizer& detokenizer, Backend& be, int64_t max_streams,
                                       int64_t max_frames)
    : det_(detokenizer), be_(be), max_frames_(max_frames), state_(std::make_unique<State>()) {
  LFM_CHECK(max_streams >= 1 && max_streams <= 4096, "detokenizer streams: max_streams ", max_streams,
            " is outside [1, 4096]");
  LFM_CHECK(max_frames >= 1 && max_frames <= det_.max_frames(), "detokenizer streams: max_frames ", max_frames,
            " is outside [1, ", det_.max_frames(), "]");
  det_.impl_->check_backend(be, "detokenizer streams");
  state_->cache = make_detokenizer_cache(*det_.impl_->lfm, be, max_streams, max_frames * Detokenizer::kUpsample);
  state_->fwd = std::make_unique<Forward>(*det_.impl_->lfm, be, *state_->cache);
  state_->streams.resize(static_cast<size_t>(max_streams));
}

std::unique_ptr<WaveformStreams> Detokenizer::streams(Backend& be, int64_t max_streams, int64_t max_frames) const {
  return std::make_unique<DetokenizerStreams>(*this, be, max_streams, max_frames);
}

DetokenizerStreams::~DetokenizerStreams() {
  for (Stream& s : state_->streams)
    if (s.open) state_->cache->close(s.seq);
}

int64_t DetokenizerStreams::open_streams() const {
  return std::count_if(state_->streams.begin(), state_->streams.end(), [](const Stream& s) { return s.open; });
}

int DetokenizerStreams::open() {
  auto& all = state_->streams;
  const auto it = std::find_if(all.begin(), all.end(), [](const Stream& s) { return !s.open; });
  LFM_CHECK(it != all.end(), "detokenizer streams: all ", all.size(), " streams are open");
  it->seq = state_->cache->open(max_frames_ * Detokenizer::kUpsample);
  it->open = true;
  it->finished = false;
  it->frames = 0;
  it->istft = std::make_unique<InverseStft>(det_.impl_->window);
  return static_cast<int>(it - all.begin());
}

DetokenizerStreams::Stream& DetokenizerStreams::stream(int id, const char* what) {
  LFM_CHECK(id >= 0 && id < static_cast<int>(state_->streams.size()) && state_->streams[static_cast<size_t>(id)].open,
            "detokenizer streams: ", what, " of stream ", id, ", which is not open");
  return state_->streams[static_cast<size_t>(id)];
}

void DetokenizerStreams::close(int id) {
  Stream& s = stream(id, "close");
  state_->cache->close(s.seq);
  s = Stream{};
}

void DetokenizerStreams::push(std::span<const std::pair<int, std::span<const int32_t>>> new_frames,
                              std::vector<std::vector<float>>& samples_out) {
  // Everything checked before any work: a failed push changes no stream.
  std::vector<Detokenizer::Impl::Item> items;
  for (size_t i = 0; i < new_frames.size(); ++i) {
    const auto& [id, codes] = new_frames[i];
    Stream& s = stream(id, "frames");
    LFM_CHECK(!s.finished, "detokenizer streams: frames for stream ", id, " after its finish");
    for (size_t k = 0; k < i; ++k)
      LFM_CHECK(new_frames[k].first != id, "detokenizer streams: stream ", id, " appears twice in one push");
    const int64_t n = Detokenizer::Impl::check_codes(codes, "detokenizer streams");
    LFM_CHECK(s.frames + n <= max_frames_, "detokenizer streams: stream ", id, " would reach ", s.frames + n,
              " frames, past its max_frames ", max_frames_);
  }
  samples_out.assign(new_frames.size(), {});
  for (size_t i = 0; i < new_frames.size(); ++i) {
    const auto& [id, codes] = new_frames[i];
    if (codes.empty()) continue;
    Stream& s = state_->streams[static_cast<size_t>(id)];
    items.push_back({s.seq, s.istft.get(), codes, &samples_out[i]});
  }
  if (items.empty()) return;
  det_.impl_->step(be_, *state_->fwd, state_->buf, items, nullptr);
  for (const auto& [id, codes] : new_frames)
    state_->streams[static_cast<size_t>(id)].frames += static_cast<int64_t>(codes.size()) / Detokenizer::kCodebooks;
}

std::vector<float> DetokenizerStreams::finish(int id) {
  Stream& s = stream(id, "finish");
  LFM_CHECK(!s.finished, "detokenizer streams: stream ", id, " finished twice");
  std::vector<float> tail;
  s.istft->finish(tail);
  s.finished = true;
  return tail;
}

}  // namespace lfm
