// An image in a request, ready for the vision tower: each tile's patches and grid, where the
// tile's image tokens stand in the prompt, and a content hash. Made by expand_images
// (engine/image_prompt.h) from decoded images; shared, immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace lfm {

struct ImageInput {
  struct Tile {
    int64_t grid_h = 0, grid_w = 0;  // patches
    std::vector<float> patches;      // [grid_h · grid_w, p·p·channels]
    int64_t position = 0;            // prompt index of the tile's first image token
    int64_t tokens = 0;              // its image tokens (consecutive from `position`)
  };
  std::vector<Tile> tiles;
  // SHA-256 (first 8 bytes) of every tile's grid and patches: equal hashes mean equal embeddings.
  // It keys the image's tokens in the prefix cache (so a repeated image reuses the cached state
  // and a different one never does) and the engine's cache of encoded images.
  uint64_t hash = 0;
};

}  // namespace lfm
