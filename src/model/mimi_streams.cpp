// MimiDecoder's decode() and its batched streams: each stream a MimiState (model/mimi_impl.h),
// one MimiDecoder::Impl::step per push for every stream in it. decode() is one stream fed in
// chunks (bounding its scratch), so a stream's samples, however its frames were pushed and beside
// whichever others, are decode()'s bits on a bitwise batch-invariant backend (every CPU one).
#include <algorithm>

#include "core/error.h"
#include "model/mimi_impl.h"

namespace lfm {

namespace {

constexpr int64_t kStepFrames = 16;  // decode() feeds this many frames per step (30 720 samples)

class MimiStreams : public WaveformStreams {
 public:
  MimiStreams(const MimiDecoder::Impl& m, Backend& be, int64_t max_streams, int64_t max_frames, int64_t limit)
      : m_(m), be_(m.runner(be)), max_frames_(max_frames) {
    LFM_CHECK(max_streams >= 1 && max_streams <= 4096, "mimi streams: max_streams ", max_streams,
              " is outside [1, 4096]");
    LFM_CHECK(max_frames >= 1 && max_frames <= limit, "mimi streams: max_frames ", max_frames, " is outside [1, ", limit,
              "]");
    streams_.resize(static_cast<size_t>(max_streams));
  }

  int open() override {
    const auto it = std::find_if(streams_.begin(), streams_.end(), [](const Stream& s) { return !s.open; });
    LFM_CHECK(it != streams_.end(), "mimi streams: all ", streams_.size(), " streams are open");
    *it = Stream{};
    it->open = true;
    it->state = m_.new_state();
    return static_cast<int>(it - streams_.begin());
  }

  void close(int id) override { stream(id, "close") = Stream{}; }

  void push(std::span<const std::pair<int, std::span<const int32_t>>> new_frames,
            std::vector<std::vector<float>>& samples_out) override {
    // Everything checked before any work: a refused push changes no stream.
    for (size_t i = 0; i < new_frames.size(); ++i) {
      const auto& [id, codes] = new_frames[i];
      Stream& s = stream(id, "frames");
      LFM_CHECK(!s.finished, "mimi streams: frames for stream ", id, " after its finish");
      for (size_t k = 0; k < i; ++k)
        LFM_CHECK(new_frames[k].first != id, "mimi streams: stream ", id, " appears twice in one push");
      const int64_t n = m_.check_codes(codes, "mimi streams");
      LFM_CHECK(s.state.frames + n <= max_frames_, "mimi streams: stream ", id, " would reach ", s.state.frames + n,
                " frames, past its max_frames ", max_frames_);
    }
    samples_out.assign(new_frames.size(), {});
    std::vector<MimiDecoder::Impl::Item> items;
    for (size_t i = 0; i < new_frames.size(); ++i) {
      const auto& [id, codes] = new_frames[i];
      if (!codes.empty()) items.push_back({&streams_[static_cast<size_t>(id)].state, codes, &samples_out[i]});
    }
    if (!items.empty()) m_.step(be_, items, scratch_, nullptr);
  }

  // Every sample is final once its frame is pushed (every layer is causal): nothing is held back.
  std::vector<float> finish(int id) override {
    Stream& s = stream(id, "finish");
    LFM_CHECK(!s.finished, "mimi streams: stream ", id, " finished twice");
    s.finished = true;
    return {};
  }

  int64_t max_frames() const override { return max_frames_; }
  int64_t open_streams() const override {
    return std::count_if(streams_.begin(), streams_.end(), [](const Stream& s) { return s.open; });
  }

 private:
  struct Stream {
    bool open = false, finished = false;
    MimiState state;
  };
  Stream& stream(int id, const char* what) {
    LFM_CHECK(id >= 0 && id < static_cast<int>(streams_.size()) && streams_[static_cast<size_t>(id)].open,
              "mimi streams: ", what, " of stream ", id, ", which is not open");
    return streams_[static_cast<size_t>(id)];
  }

  const MimiDecoder::Impl& m_;
  Backend& be_;
  int64_t max_frames_;
  std::vector<Stream> streams_;
  MimiScratch scratch_;
};

}  // namespace

int64_t MimiDecoder::Impl::check_codes(std::span<const int32_t> codes, const char* who) const {
  LFM_CHECK(codes.size() % kCodebooks == 0, who, ": ", codes.size(), " codes are not whole frames of ", kCodebooks,
            " codebooks");
  for (size_t i = 0; i < codes.size(); ++i)
    LFM_CHECK(codes[i] >= 0 && codes[i] < cfg.codebook_size, who, ": code ", codes[i], " (frame ", i / kCodebooks,
              ", codebook ", i % kCodebooks, ") is outside [0, ", cfg.codebook_size, ")");
  return static_cast<int64_t>(codes.size()) / kCodebooks;
}

MimiState MimiDecoder::Impl::new_state() const {
  MimiState s;
  s.up_tail.assign(static_cast<size_t>(upsample.tail() * upsample.out), 0.0f);
  s.keys.resize(layers.size());
  s.values.resize(layers.size());
  for (const MimiConv& c : convs) s.conv_ctx.emplace_back(static_cast<size_t>(c.context() * c.in), 0.0f);
  for (const MimiConvTr& c : trs) s.tr_tail.emplace_back(static_cast<size_t>(c.tail() * c.out), 0.0f);
  return s;
}

std::vector<float> MimiDecoder::decode(Backend& be, std::span<const int32_t> codes, Trace* trace) const {
  const Impl& m = *impl_;
  const int64_t frames = m.check_codes(codes, "mimi");
  LFM_CHECK(frames <= max_frames(), "mimi: ", frames, " frames exceed the ", max_frames(),
            " one sequence may have (max_position_embeddings / ", m.cfg.upsample_stride(), ")");
  Backend& run = m.runner(be);
  std::vector<float> samples;
  samples.reserve(static_cast<size_t>(frames * samples_per_frame()));
  MimiState state = m.new_state();
  MimiScratch scratch;
  for (int64_t f = 0; f < frames; f += kStepFrames) {
    const int64_t n = std::min(kStepFrames, frames - f);
    const Impl::Item item{&state, codes.subspan(static_cast<size_t>(f * kCodebooks), static_cast<size_t>(n * kCodebooks)),
                          &samples};
    m.step(run, std::span<const Impl::Item>(&item, 1), scratch, trace);
  }
  return samples;
}

std::unique_ptr<WaveformStreams> MimiDecoder::streams(Backend& be, int64_t max_streams, int64_t max_frames) const {
  return std::make_unique<MimiStreams>(*impl_, be, max_streams, max_frames, this->max_frames());
}

}  // namespace lfm
