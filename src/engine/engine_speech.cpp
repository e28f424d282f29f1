// Speech output (LFM2-Audio) in the engine, as transformers' Lfm2AudioForConditionalGeneration.
// generate does it for one prompt, here for every speaking request of a step together:
//   * a request's outputs are text tokens or audio frames; which one comes next is a small state
//     machine (AudioOutMode): sequential switches to audio after <|audio_start|> and back to text
//     after the end-of-audio frame; interleaved alternates runs of interleaved_n_text tokens and
//     interleaved_n_audio frames (every step counts, whatever it made) until <|text_end|>, then
//     speaks until the end-of-audio frame;
//   * a frame is made from the backbone's final normed hidden state at the position fed last (no
//     text logits are computed for it) by the depth transformer, all of a step's speaking requests
//     in one batch (model/speech_out.h), each code drawn with the request's own audio sampling;
//   * the frame goes back in as one position whose input is the sum of its codes' embeddings; the
//     position's key in the state cache is derived from the codes (engine/media_keys.h), so a
//     conversation's spoken turns are found in the prefix cache like text.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_active.h"
#include "engine/media_keys.h"
#include "model/speech_out.h"
#include "model/waveform_decoder.h"

namespace lfm {

namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// transformers' Lfm2AudioForConditionalGeneration._sample: the first best code when greedy
// (temperature ≤ 0 or top_k 1), else softmax(logits / T) over the codes not below the k-th best.
// Only codebook 0 may end the audio: the other codebooks choose among the real codes (transformers
// would draw the end code there too and then refuse the frame in its detokenizer).
int32_t draw_code(const float* logits, int64_t V, const AudioOutParams& p, std::mt19937_64& rng) {
  if (p.temperature <= 0.0f || p.top_k == 1)
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  std::vector<double> z(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) z[static_cast<size_t>(i)] = static_cast<double>(logits[i]) / p.temperature;
  double threshold = -std::numeric_limits<double>::infinity();
  if (p.top_k > 0 && p.top_k < V) {
    std::vector<double> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<double>());
    threshold = sorted[static_cast<size_t>(p.top_k - 1)];
  }
  double top = -std::numeric_limits<double>::infinity();
  for (double v : z)
    if (v >= threshold) top = std::max(top, v);
  double sum = 0;
  for (double& v : z) {
    v = v >= threshold ? std::exp(v - top) : 0.0;
    sum += v;
  }
  const double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  double acc = 0;
  int32_t last = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (z[static_cast<size_t>(i)] <= 0) continue;
    acc += z[static_cast<size_t>(i)];
    last = static_cast<int32_t>(i);
    if (u < acc) return last;
  }
  return last;  // u at the very top of the range (rounding)
}

}  // namespace

void Engine::prepare_speech(Active& a) {
  const Request& req = a.req;
  if (req.audio_out.mode == AudioOutMode::kNone && req.audio_frames.empty()) return;
  const SpeechOutModel* so = model_.speech_out();
  LFM_CHECK(so, "engine: the request ", req.audio_out.mode != AudioOutMode::kNone ? "asks for speech output" : "has audio frames",
            " but the model has no speech output head (load an LFM2-Audio checkpoint with its depthformer)");
  req.audio_out.validate();
  const SpeechOutConfig& sc = so->config();
  LFM_CHECK(req.drafter == Drafter::kNone, "engine: speech output cannot be drafted (drafter ", drafter_name(req.drafter),
            ")");
  LFM_CHECK(!req.grammar, "engine: speech output cannot follow a grammar");
  LFM_CHECK(!req.audio_out.waveform || req.audio_out.mode == AudioOutMode::kNone || detok_,
            "engine: the model has no audio detokenizer to make waveforms (an LFM2.5-Audio checkpoint's "
            "audio_detokenizer/ folder, or the vocoder GGUF): ask for codes only (waveform off)");
  // A waveform stream holds at most detok_'s frames: its request generates no more positions.
  if (req.audio_out.waveform && detok_) a.limit = std::min(a.limit, a.n_prompt + detok_->max_frames());
  auto sp = std::make_unique<Active::Speech>();
  sp->left = sc.interleaved_text;
  if (req.audio_out.audio_first) {
    LFM_CHECK(req.audio_out.mode == AudioOutMode::kSequential && req.prompt.back() == sc.audio_start_id,
              "engine: speaking from the first step needs sequential generation and a prompt ending with "
              "<|audio_start|> (id ", sc.audio_start_id, "), got ", audio_out_mode_name(req.audio_out.mode),
              " ending with id ", req.prompt.back());
    sp->audio = true;
  }
  sp->rng.seed(req.sampling.seed ? *req.sampling.seed ^ 0xA0D10C0DEull : std::random_device{}());
  if (a.prompt_keys.empty()) a.prompt_keys = req.prompt;
  const int64_t C = sc.codebooks;
  int64_t end_of_last = 0;
  for (size_t m = 0; m < req.audio_frames.size(); ++m) {
    const AudioOutFrames* f = req.audio_frames[m].get();
    LFM_CHECK(f && f->frames > 0 && static_cast<int64_t>(f->codes.size()) == f->frames * C, "engine: audio frames ", m,
              " (", f ? f->frames : 0, " frames, ", f ? f->codes.size() : 0, " codes) do not hold ", C,
              " codes per frame");
    LFM_CHECK(f->position >= end_of_last && f->position + f->frames <= a.n_prompt, "engine: audio frames ", m,
              " at prompt positions [", f->position, ", ", f->position + f->frames,
              ") overlap the frames before them or leave the prompt of ", a.n_prompt, " tokens");
    for (int32_t code : f->codes)
      LFM_CHECK(code >= 0 && code < sc.audio_vocab, "engine: audio frames ", m, " hold code ", code,
                ", outside the audio vocabulary [0, ", sc.audio_vocab, ")");
    for (int64_t i = 0; i < f->frames; ++i) {
      const int64_t p = f->position + i;
      for (const Active::TileRows& tr : a.tiles)
        LFM_CHECK(p < tr.position() || p >= tr.position() + tr.tokens(), "engine: audio frames ", m,
                  " overlap an image or audio clip at prompt position ", p);
      std::vector<int32_t> codes(f->codes.begin() + i * C, f->codes.begin() + (i + 1) * C);
      a.prompt_keys[static_cast<size_t>(p)] = media_token_key(frame_codes_hash(codes), 0);
      sp->frames.emplace(p, std::move(codes));
    }
    end_of_last = f->position + f->frames;
  }
  a.speech = std::move(sp);
}

void Engine::speech_rows(const Active& a, int64_t from, int64_t n, std::vector<BatchItem::Embeddings>& rows,
                         std::vector<int32_t>& keys, std::vector<int32_t>& ids, std::vector<float>& embeds) const {
  ids.clear();
  const auto& frames = a.speech->frames;
  int64_t count = 0;
  for (int64_t p = from; p < from + n; ++p) count += frames.count(p) ? 1 : 0;
  if (count == 0) return;
  const SpeechOutModel& so = *model_.speech_out();
  const int64_t D = model_.config().hidden_size;
  embeds.resize(static_cast<size_t>(count * D));  // sized first: the rows point into it
  ids.assign(a.tokens.begin() + from, a.tokens.begin() + from + n);
  int64_t k = 0;
  for (int64_t p = from; p < from + n; ++p) {
    const auto it = frames.find(p);
    if (it == frames.end()) continue;
    float* row = embeds.data() + k++ * D;
    so.frame_embedding(it->second, row);
    rows.push_back({p - from, 1, row});
    int32_t& id = ids[static_cast<size_t>(p - from)];
    if (id < 0) id = 0;  // a generated frame's key: any valid id, its row is the embedding
  }
  if (keys.empty())
    for (int64_t p = from; p < from + n; ++p)
      keys.push_back(p < a.n_prompt ? a.prompt_keys[static_cast<size_t>(p)] : a.tokens[static_cast<size_t>(p)]);
}

void Engine::speech_after_text(Active& a, int32_t token) {
  Active::Speech& sp = *a.speech;
  const SpeechOutConfig& sc = model_.speech_out()->config();
  switch (a.req.audio_out.mode) {
    case AudioOutMode::kSequential:
      if (token == sc.audio_start_id) sp.audio = true;
      break;
    case AudioOutMode::kInterleaved:
      --sp.left;
      if (token == sc.text_end_id) sp.text_done = true;
      if (sp.left <= 0 || sp.text_done) {
        sp.audio = true;
        sp.left = sc.interleaved_audio;
      }
      break;
    case AudioOutMode::kNone:
      break;
  }
}

void Engine::make_frames(const std::vector<Active*>& speakers, const std::vector<size_t>& items) {
  const SpeechOutConfig& sc = model_.speech_out()->config();
  const int64_t n = static_cast<int64_t>(speakers.size()), D = model_.config().hidden_size, C = sc.codebooks;
  std::vector<float> hidden(static_cast<size_t>(n * D));
  for (int64_t i = 0; i < n; ++i) {
    const float* h = out_.hidden_of(items[static_cast<size_t>(i)]);
    std::copy(h, h + D, hidden.begin() + i * D);
  }
  std::vector<int32_t> codes(static_cast<size_t>(n * C));
  try {
    depth_->run(hidden.data(), n, [&](int64_t row, int64_t codebook, const float* logits) {
      Active& a = *speakers[static_cast<size_t>(row)];
      // The end code is the last of the vocabulary: codebooks after the first draw below it.
      const int64_t choices = codebook == 0 || sc.audio_eos != sc.audio_vocab - 1 ? sc.audio_vocab : sc.audio_eos;
      return draw_code(logits, choices, a.req.audio_out, a.speech->rng);
    }, codes.data());
  } catch (...) {
    const std::string why = "engine: speech output failed: " + exception_text(std::current_exception());
    for (Active* a : speakers) finish(*a, FinishReason::kError, why);
    return;
  }
  // Each frame's event and state; then one detokenizer step for every waveform that grew.
  std::vector<Event> events(static_cast<size_t>(n));
  std::vector<bool> ok(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) {
    Active& a = *speakers[static_cast<size_t>(i)];
    ok[static_cast<size_t>(i)] = guarded(a, "speech output", [&] {
      events[static_cast<size_t>(i)] = deliver_frame(a, std::span<const int32_t>(codes).subspan(i * C, C));
    });
  }
  std::vector<std::pair<int, std::span<const int32_t>>> pushes;
  std::vector<int64_t> pushed_row;
  for (int64_t i = 0; i < n; ++i) {
    Active& a = *speakers[static_cast<size_t>(i)];
    const Event& ev = events[static_cast<size_t>(i)];
    if (!ok[static_cast<size_t>(i)] || !a.req.audio_out.waveform || ev.audio_end) continue;
    if (a.speech->detok_stream < 0 && !guarded(a, "opening the waveform", [&] { a.speech->detok_stream = detok_->open(); }))
      continue;
    pushes.emplace_back(a.speech->detok_stream, std::span<const int32_t>(ev.audio_codes));
    pushed_row.push_back(i);
  }
  if (!pushes.empty()) {
    std::vector<std::vector<float>> samples;
    try {
      detok_->push(pushes, samples);
      for (size_t k = 0; k < pushes.size(); ++k) events[static_cast<size_t>(pushed_row[k])].audio = std::move(samples[k]);
    } catch (...) {
      const std::string why = "engine: the waveform failed: " + exception_text(std::current_exception());
      for (int64_t i : pushed_row) {
        finish(*speakers[static_cast<size_t>(i)], FinishReason::kError, why);
        ok[static_cast<size_t>(i)] = false;
      }
    }
  }
  const int rate = detok_ ? model_.detokenizer()->sample_rate() : 0;
  for (int64_t i = 0; i < n; ++i) {
    Active& a = *speakers[static_cast<size_t>(i)];
    if (!ok[static_cast<size_t>(i)] || a.finished) continue;
    Event& ev = events[static_cast<size_t>(i)];
    guarded(a, "speech output", [&] {
      // The end-of-audio frame ends this stretch of speech: the waveform's tail is final now.
      if (ev.audio_end && a.speech->detok_stream >= 0) ev.audio = end_waveform(a);
      if (!ev.audio.empty()) {
        ev.sample_rate = rate;
        if (a.usage.first_audio_seconds == 0) a.usage.first_audio_seconds = since(a.submitted);
        a.usage.audio_seconds += static_cast<double>(ev.audio.size()) / rate;
      }
      a.stream->push(std::move(ev));
      if (static_cast<int64_t>(a.tokens.size()) >= a.limit) finish(a, FinishReason::kLength);
    });
  }
}

std::vector<float> Engine::end_waveform(Active& a) {
  const int stream = a.speech->detok_stream;
  if (stream < 0) return {};
  a.speech->detok_stream = -1;
  struct Closer {
    WaveformStreams& d;
    int s;
    ~Closer() { d.close(s); }
  } closer{*detok_, stream};
  return detok_->finish(stream);
}

Event Engine::deliver_frame(Active& a, std::span<const int32_t> codes) {
  const SpeechOutConfig& sc = model_.speech_out()->config();
  Active::Speech& sp = *a.speech;
  std::vector<int32_t> frame(codes.begin(), codes.end());
  const bool end = frame[0] == sc.audio_eos;  // codebook 0 decides; the frame is then all end codes
  if (end) std::fill(frame.begin(), frame.end(), sc.audio_eos);
  if (a.req.audio_out.mode == AudioOutMode::kInterleaved) --sp.left;
  if (end) {
    sp.audio = false;
  } else if (a.req.audio_out.mode == AudioOutMode::kInterleaved && sp.left <= 0 && !sp.text_done) {
    sp.audio = false;
    sp.left = sc.interleaved_text;
  }
  if (a.n_generated == 0) a.usage.first_token_seconds = since(a.submitted);
  const int64_t position = static_cast<int64_t>(a.tokens.size());
  a.tokens.push_back(media_token_key(frame_codes_hash(frame), 0));
  sp.frames.emplace(position, frame);
  ++a.n_generated;
  ++a.usage.audio_frames;
  ++totals_.generated_tokens;
  Event ev;
  ev.kind = Event::Kind::kAudio;
  ev.audio_codes = std::move(frame);
  ev.audio_end = end;
  return ev;
}

}  // namespace lfm
