// Images in the engine (LFM2-VL): a request's image tokens get their embeddings from the vision
// tower, encoded when a prefill chunk first reaches their tile (a chunk that starts past a cached
// prefix never encodes what the cache holds) — in stages over several steps while other requests
// decode (EngineOptions::encode_slice_ms) — and the state cache keys each image token by its
// image's content so the prefix cache reuses a repeated image and never confuses two.
#include <algorithm>
#include <chrono>

#include "engine/engine.h"
#include "engine/engine_active.h"
#include "model/vision_model.h"

namespace lfm {

namespace {

// The most bytes of encoded tiles kept for reuse (a 1.6B-shape tile is 2 MiB).
constexpr size_t kTileCacheBytes = size_t(64) << 20;

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser: a bijection, so distinct inputs stay distinct
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The cache key of image token i of an image: negative, so never a token id.
int32_t image_token_key(uint64_t image_hash, int64_t i) {
  return -1 - static_cast<int32_t>(mix64(image_hash + static_cast<uint64_t>(i)) >> 33);
}

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
        a.prompt_keys[static_cast<size_t>(p)] = image_token_key(img->hash, index++);
      }
      end_of_last = tile.position + tile.tokens;
      a.tiles.push_back({&tile, img->hash, static_cast<int>(t), nullptr});
    }
  }
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
    // Only a prompt chunk can reach an image (an encoding in progress is for the prompt too).
    if (a.tiles.empty() || !a.verify.empty() || a.n_fed >= a.n_prompt) continue;
    const int64_t from = a.n_fed, to = a.n_fed + counts[i];
    auto out_of_time = [&] {
      return streams && slice_ms > 0 && stages_run > 0 &&
             std::chrono::duration<double, std::milli>(Clock::now() - step_started).count() >= slice_ms;
    };
    bool ran = false;
    try {
      while (true) {
        if (!a.encoding) {
          // The chunk's tiles without embeddings: from the cache of encoded tiles, else encoded.
          std::vector<size_t> need;
          for (size_t t = 0; t < a.tiles.size(); ++t) {
            Active::TileRows& tr = a.tiles[t];
            if (tr.embeds || tr.tile->position >= to || tr.tile->position + tr.tile->tokens <= from) continue;
            const auto key = std::pair{tr.image_hash, tr.tile_index};
            auto it = std::find_if(tile_cache_.begin(), tile_cache_.end(), [&](const auto& e) { return e.first == key; });
            if (it != tile_cache_.end()) {
              tile_cache_.splice(tile_cache_.end(), tile_cache_, it);  // now the most recently used
              tr.embeds = it->second;
            } else {
              need.push_back(t);
            }
          }
          if (need.empty()) break;
          std::vector<VisionTile> tiles;
          for (size_t t : need) tiles.push_back({a.tiles[t].tile->grid_h, a.tiles[t].tile->grid_w, a.tiles[t].tile->patches});
          a.encoding = std::make_unique<VisionEncoding>(*model_.vision(), backend_, std::move(tiles));
          a.encoding_tiles = std::move(need);
        }
        while (!a.encoding->done() && !out_of_time()) {
          const auto started = Clock::now();
          a.encoding->run_stage();
          ++stages_run;
          ran = true;
          a.usage.encode_seconds += std::chrono::duration<double>(Clock::now() - started).count();
        }
        if (!a.encoding->done()) break;  // goes on next step
        std::vector<std::vector<float>> out = a.encoding->take();
        a.usage.image_tiles += static_cast<int64_t>(out.size());
        for (size_t t = 0; t < out.size(); ++t) {
          Active::TileRows& tr = a.tiles[a.encoding_tiles[t]];
          auto embeds = std::make_shared<const std::vector<float>>(std::move(out[t]));
          tr.embeds = embeds;
          tile_cache_.emplace_back(std::pair{tr.image_hash, tr.tile_index}, embeds);
          tile_cache_bytes_ += embeds->size() * sizeof(float);
        }
        a.encoding.reset();
        a.encoding_tiles.clear();
        while (tile_cache_bytes_ > kTileCacheBytes && !tile_cache_.empty()) {
          tile_cache_bytes_ -= tile_cache_.front().second->size() * sizeof(float);
          tile_cache_.pop_front();
        }
      }
      a.usage.encode_steps += ran ? 1 : 0;
    } catch (...) {
      a.encoding.reset();
      fail_request(a, "encoding the image", std::current_exception());
      dropped = true;
      continue;
    }
    // The chunk stops before the first tile still without embeddings; it is fed in a later step.
    int64_t stop = to;
    for (const Active::TileRows& tr : a.tiles)
      if (!tr.embeds && tr.tile->position < stop && tr.tile->position + tr.tile->tokens > from)
        stop = std::max(from, tr.tile->position);
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
    const int64_t lo = std::max(from, tr.tile->position), hi = std::min(from + n, tr.tile->position + tr.tile->tokens);
    if (lo >= hi) continue;
    LFM_CHECK(tr.embeds, "engine: image tile at prompt position ", tr.tile->position, " was not encoded");
    rows.push_back({lo - from, hi - lo, tr.embeds->data() + (lo - tr.tile->position) * d});
  }
  for (int64_t p = from; p < from + n; ++p)
    keys.push_back(p < a.n_prompt ? a.prompt_keys[static_cast<size_t>(p)] : a.tokens[static_cast<size_t>(p)]);
}

}  // namespace lfm
