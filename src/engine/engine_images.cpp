// Images (LFM2-VL) and audio (LFM2-Audio) in the engine: a request's image or audio tokens get
// their embeddings from the vision tower or the speech encoder, encoded when a prefill chunk first
// reaches their tile or clip (a chunk that starts past a cached prefix never encodes what the cache
// holds) — in stages over several steps while other requests decode (EngineOptions::encode_slice_ms)
// — and the state cache keys each such token by its medium's content so the prefix cache reuses a
// repeated image or clip and never confuses two.
#include <algorithm>
#include <chrono>

#include "engine/engine.h"
#include "engine/engine_active.h"
#include "engine/media_keys.h"
#include "model/audio_model.h"
#include "model/vision_model.h"

namespace lfm {

namespace {

// The most bytes of encoded tiles kept for reuse (a 1.6B-shape tile is 2 MiB).
constexpr size_t kTileCacheBytes = size_t(64) << 20;

}  // namespace

void Engine::prepare_images(Active& a) {
  if (a.req.images.empty()) return;
  const VisionModel* vision = model_.vision();
  LFM_CHECK(vision, "engine: the request has ", a.req.images.size(),
            " images but the model has no vision tower (load an LFM2-VL checkpoint)");
  const VisionConfig& vc = vision->config();
  const int64_t patch_in = vc.num_channels * vc.patch_size * vc.patch_size;
  a.prompt_keys = a.req.prompt;
  int64_t end_of_last = 0;
  for (size_t m = 0; m < a.req.images.size(); ++m) {
    const ImageInput* img = a.req.images[m].get();
    LFM_CHECK(img && !img->tiles.empty(), "engine: image ", m, " has no tiles");
    int64_t index = 0;  // the image's tokens, counted over its tiles
    for (size_t t = 0; t < img->tiles.size(); ++t) {
      const ImageInput::Tile& tile = img->tiles[t];
      LFM_CHECK(tile.grid_h > 0 && tile.grid_w > 0 && tile.grid_h % vc.downsample_factor == 0 &&
                    tile.grid_w % vc.downsample_factor == 0 &&
                    static_cast<int64_t>(tile.patches.size()) == tile.grid_h * tile.grid_w * patch_in,
                "engine: image ", m, " tile ", t, " (", tile.grid_h, "x", tile.grid_w, " patches, ",
                tile.patches.size(), " values) does not fit the vision tower's patches of ", patch_in, " values");
      LFM_CHECK(tile.tokens == vision->tokens_for(tile.grid_h, tile.grid_w), "engine: image ", m, " tile ", t,
                " stands for ", tile.tokens, " tokens, the vision tower makes ",
                vision->tokens_for(tile.grid_h, tile.grid_w));
      LFM_CHECK(tile.position >= end_of_last && tile.position + tile.tokens <= a.n_prompt, "engine: image ", m,
                " tile ", t, " at prompt positions [", tile.position, ", ", tile.position + tile.tokens,
                ") overlaps another tile or leaves the prompt of ", a.n_prompt, " tokens");
      for (int64_t p = tile.position; p < tile.position + tile.tokens; ++p) {
        LFM_CHECK(a.req.prompt[static_cast<size_t>(p)] == vc.image_token_id, "engine: prompt position ", p,
                  " of image ", m, " holds token ", a.req.prompt[static_cast<size_t>(p)], ", not the image token ",
                  vc.image_token_id);
        a.prompt_keys[static_cast<size_t>(p)] = media_token_key(img->hash, index++);
      }
      end_of_last = tile.position + tile.tokens;
      a.tiles.push_back({&tile, nullptr, img->hash, static_cast<int>(t), nullptr});
    }
  }
}

void Engine::prepare_audio(Active& a) {
  if (a.req.audios.empty()) return;
  const AudioModel* audio = model_.audio();
  LFM_CHECK(audio, "engine: the request has ", a.req.audios.size(),
            " audio clips but the model has no speech encoder (load an LFM2-Audio checkpoint)");
  const AudioConfig& ac = audio->config();
  if (a.prompt_keys.empty()) a.prompt_keys = a.req.prompt;
  for (size_t m = 0; m < a.req.audios.size(); ++m) {
    const AudioInput* clip = a.req.audios[m].get();
    LFM_CHECK(clip && clip->frames > 0 && clip->mel_bins == ac.num_mel_bins &&
                  static_cast<int64_t>(clip->features.size()) == clip->frames * clip->mel_bins,
              "engine: audio clip ", m, " (", clip ? clip->frames : 0, " frames of ", clip ? clip->mel_bins : 0,
              " features) does not fit the speech encoder's ", ac.num_mel_bins, " mel bins");
    LFM_CHECK(clip->tokens == audio->tokens_for(clip->frames), "engine: audio clip ", m, " stands for ", clip->tokens,
              " tokens, the speech encoder makes ", audio->tokens_for(clip->frames));
    LFM_CHECK(clip->tokens <= ac.max_position_embeddings, "engine: audio clip ", m, " makes ", clip->tokens,
              " encoder rows, past the speech encoder's ", ac.max_position_embeddings, " positions");
    LFM_CHECK(clip->position >= 0 && clip->position + clip->tokens <= a.n_prompt, "engine: audio clip ", m,
              " at prompt positions [", clip->position, ", ", clip->position + clip->tokens, ") leaves the prompt of ",
              a.n_prompt, " tokens");
    for (int64_t p = clip->position; p < clip->position + clip->tokens; ++p) {
      LFM_CHECK(a.req.prompt[static_cast<size_t>(p)] == ac.audio_token_id, "engine: prompt position ", p,
                " of audio clip ", m, " holds token ", a.req.prompt[static_cast<size_t>(p)], ", not the audio token ",
                ac.audio_token_id);
      a.prompt_keys[static_cast<size_t>(p)] = media_token_key(clip->hash, p - clip->position);
    }
    a.tiles.push_back({nullptr, clip, clip->hash, 0, nullptr});
  }
  // Image tiles and clips in prompt order, none overlapping another.
  std::stable_sort(a.tiles.begin(), a.tiles.end(),
                   [](const Active::TileRows& x, const Active::TileRows& y) { return x.position() < y.position(); });
  for (size_t t = 1; t < a.tiles.size(); ++t)
    LFM_CHECK(a.tiles[t].position() >= a.tiles[t - 1].position() + a.tiles[t - 1].tokens(), "engine: the ",
              a.tiles[t].clip ? "audio clip" : "image tile", " at prompt position ", a.tiles[t].position(),
              " overlaps the one before it");
}

std::vector<int32_t> Engine::prefix_keys(const Active& a) const {
  if (a.prompt_keys.empty()) return a.tokens;
  std::vector<int32_t> keys = a.prompt_keys;
  keys.insert(keys.end(), a.tokens.begin() + a.n_prompt, a.tokens.end());
  return keys;
}

void Engine::encode_images(std::vector<Active*>& batch, std::vector<int64_t>& counts) {
  using Clock = std::chrono::steady_clock;
  const double slice_ms = opt_.encode_slice_ms >= 0 ? opt_.encode_slice_ms : opt_.itl_target_ms;
  const auto step_started = Clock::now();
  int64_t stages_run = 0;  // this step, over every request
  bool dropped = false;
  // Streams in this step: encoding yields to them after its slice of the step. (A request that
  // encodes is prefilling, so these are always others.)
  const bool streams = std::any_of(batch.begin(), batch.end(), [](const Active* b) { return b->decoding(); });
  for (size_t i = 0; i < batch.size(); ++i) {
    Active& a = *batch[i];
    // Only a prompt chunk can reach an image or clip (an encoding in progress is for the prompt too).
    if (a.tiles.empty() || !a.verify.empty() || a.n_fed >= a.n_prompt) continue;
    const int64_t from = a.n_fed, to = a.n_fed + counts[i];
    auto out_of_time = [&] {
      return streams && slice_ms > 0 && stages_run > 0 &&
             std::chrono::duration<double, std::milli>(Clock::now() - step_started).count() >= slice_ms;
    };
    bool ran = false;
    try {
      while (true) {
        if (!a.encoding && !a.audio_encoding) {
          // The chunk's tiles and clips without embeddings: from the cache of encoded ones, else
          // encoded (one kind per encoding: the kind of the first one needed).
          std::vector<size_t> need;
          for (size_t t = 0; t < a.tiles.size(); ++t) {
            Active::TileRows& tr = a.tiles[t];
            if (tr.embeds || tr.position() >= to || tr.position() + tr.tokens() <= from) continue;
            const auto key = std::pair{tr.media_hash, tr.tile_index};
            auto it = std::find_if(tile_cache_.begin(), tile_cache_.end(), [&](const auto& e) { return e.first == key; });
            if (it != tile_cache_.end()) {
              tile_cache_.splice(tile_cache_.end(), tile_cache_, it);  // now the most recently used
              tr.embeds = it->second;
            } else if (need.empty() || (a.tiles[need.front()].clip != nullptr) == (tr.clip != nullptr)) {
              need.push_back(t);
            }
          }
          if (need.empty()) break;
          if (a.tiles[need.front()].clip) {
            std::vector<AudioClip> clips;
            for (size_t t : need) clips.push_back({a.tiles[t].clip->frames, a.tiles[t].clip->features});
            a.audio_encoding = std::make_unique<AudioEncoding>(*model_.audio(), backend_, std::move(clips));
          } else {
            std::vector<VisionTile> tiles;
            for (size_t t : need)
              tiles.push_back({a.tiles[t].tile->grid_h, a.tiles[t].tile->grid_w, a.tiles[t].tile->patches});
            a.encoding = std::make_unique<VisionEncoding>(*model_.vision(), backend_, std::move(tiles));
          }
          a.encoding_tiles = std::move(need);
        }
        auto done = [&] { return a.encoding ? a.encoding->done() : a.audio_encoding->done(); };
        while (!done() && !out_of_time()) {
          const auto started = Clock::now();
          if (a.encoding)
            a.encoding->run_stage();
          else
            a.audio_encoding->run_stage();
          ++stages_run;
          ran = true;
          a.usage.encode_seconds += std::chrono::duration<double>(Clock::now() - started).count();
        }
        if (!done()) break;  // goes on next step
        std::vector<std::vector<float>> out = a.encoding ? a.encoding->take() : a.audio_encoding->take();
        (a.encoding ? a.usage.image_tiles : a.usage.audio_clips) += static_cast<int64_t>(out.size());
        for (size_t t = 0; t < out.size(); ++t) {
          Active::TileRows& tr = a.tiles[a.encoding_tiles[t]];
          auto embeds = std::make_shared<const std::vector<float>>(std::move(out[t]));
          tr.embeds = embeds;
          tile_cache_.emplace_back(std::pair{tr.media_hash, tr.tile_index}, embeds);
          tile_cache_bytes_ += embeds->size() * sizeof(float);
        }
        a.encoding.reset();
        a.audio_encoding.reset();
        a.encoding_tiles.clear();
        while (tile_cache_bytes_ > kTileCacheBytes && !tile_cache_.empty()) {
          tile_cache_bytes_ -= tile_cache_.front().second->size() * sizeof(float);
          tile_cache_.pop_front();
        }
      }
      a.usage.encode_steps += ran ? 1 : 0;
    } catch (...) {
      const bool audio = a.audio_encoding != nullptr;
      a.encoding.reset();
      a.audio_encoding.reset();
      fail_request(a, audio ? "encoding the audio" : "encoding the image", std::current_exception());
      dropped = true;
      continue;
    }
    // The chunk stops before the first tile or clip still without embeddings; it is fed in a later step.
    int64_t stop = to;
    for (const Active::TileRows& tr : a.tiles)
      if (!tr.embeds && tr.position() < stop && tr.position() + tr.tokens() > from)
        stop = std::max(from, tr.position());
    counts[i] = stop - from;
    dropped = dropped || counts[i] == 0;
  }
  if (!dropped) return;
  for (size_t i = batch.size(); i-- > 0;)
    if (batch[i]->finished || counts[i] == 0) {
      batch.erase(batch.begin() + static_cast<std::ptrdiff_t>(i));
      counts.erase(counts.begin() + static_cast<std::ptrdiff_t>(i));
    }
  std::erase_if(running_, [](const auto& p) { return p->finished; });
}

void Engine::image_rows(const Active& a, int64_t from, int64_t n, std::vector<BatchItem::Embeddings>& rows,
                        std::vector<int32_t>& keys) const {
  rows.clear();
  keys.clear();
  if (a.tiles.empty() || from >= a.n_prompt) return;
  const int64_t d = model_.config().hidden_size;
  for (const Active::TileRows& tr : a.tiles) {
    const int64_t lo = std::max(from, tr.position()), hi = std::min(from + n, tr.position() + tr.tokens());
    if (lo >= hi) continue;
    LFM_CHECK(tr.embeds, "engine: the ", tr.clip ? "audio clip" : "image tile", " at prompt position ", tr.position(),
              " was not encoded");
    rows.push_back({lo - from, hi - lo, tr.embeds->data() + (lo - tr.position()) * d});
  }
  for (int64_t p = from; p < from + n; ++p)
    keys.push_back(p < a.n_prompt ? a.prompt_keys[static_cast<size_t>(p)] : a.tokens[static_cast<size_t>(p)]);
}

}  // namespace lfm
