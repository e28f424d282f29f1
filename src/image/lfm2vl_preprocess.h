// LFM2-VL image preprocessing, as transformers' Lfm2VlImageProcessorFast (v5.2.0) does it, and the
// prompt tokens one image expands to, as Lfm2VlProcessor.expand_text_with_placeholders writes them.
//
// preprocess (HF _preprocess / resize_and_split):
//   - smart_resize: both sides to multiples of patch·downsample (32), pixel count within
//     [min_image_tokens, max_image_tokens]·32² — the single tile, or the thumbnail;
//   - an image "too large" (its sides rounded to 32, floor 16 — not smart_resize's floor of 32 —
//     over max_image_tokens·32²·max_pixels_tolerance) with splitting enabled is resized to a grid of
//     tile_size tiles (cols×rows chosen by aspect ratio among min_tiles..max_tiles, HF's tie rule),
//     split row-major, then the thumbnail (smart_resize size) follows when use_thumbnail and the
//     grid is not 1×1;
//   - every resize: uint8 → float32 torch antialiased bilinear (resize.h) → round half to even →
//     uint8, as torchvision 0.14's tensor resize does (resizing in float and not rounding differs
//     by up to one level);
//   - rescale and normalise fused as HF fuses them: (x − mean/rescale) / (std/rescale) in float32,
//     i.e. (x − 127.5) / 127.5 for LFM2-VL;
//   - patches of encoder_patch_size², flattened (row, column, channel), channel innermost.
// The result matches the processor's pixel_values bit for bit (tests/image_preprocess_test.cpp),
// without its padding to max_num_patches (pixel_attention_mask is 1 on exactly these patches).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "image/image.h"

namespace lfm::image {

struct ProcessorConfig {  // defaults = LFM2-VL's
  int downsample_factor = 2, encoder_patch_size = 16, tile_size = 512, min_tiles = 2, max_tiles = 10;
  int min_image_tokens = 64, max_image_tokens = 256;
  bool do_image_splitting = true, use_thumbnail = true;
  double max_pixels_tolerance = 2.0;
  float image_mean[3] = {0.5f, 0.5f, 0.5f}, image_std[3] = {0.5f, 0.5f, 0.5f};
  double rescale_factor = 1.0 / 255;
  bool do_rescale = true, do_normalize = true;

  // preprocessor_config.json (flat) or processor_config.json (transformers v5 nests the image
  // processor's keys under "image_processor", and that object wins when present). Unknown keys are
  // ignored; a known key with a bad type or value throws lfm::Error naming it. "resample" must be
  // 2 (bilinear), the only interpolation implemented.
  static ProcessorConfig from_json(const nlohmann::json& j);
};

// One tile's patches: [patches_h * patches_w][p * p * 3], patches row-major, inside a patch
// (py, px, channel) with channel innermost.
struct ImageTile {
  int patches_h = 0, patches_w = 0;
  std::vector<float> patches;
  // Tokens after the projector's pixel unshuffle: ceil(h / f) · ceil(w / f).
  int tokens(int downsample_factor) const;
};

struct PreprocessedImage {
  int rows = 1, cols = 1;  // the tile grid; 1×1 when the image is one tile
  bool thumbnail = false;  // tiles.back() is the thumbnail
  // smart_resize's size (HF's image_sizes): the single tile's, or the thumbnail's. The processor
  // counts the single-tile / thumbnail tokens from it.
  int resized_height = 0, resized_width = 0;
  std::vector<ImageTile> tiles;  // grid tiles row-major, then the thumbnail
};

PreprocessedImage preprocess(const Image& image, const ProcessorConfig& config);

// What preprocess allocates for a width x height image, from the same size arithmetic (nothing is
// decoded): `tiles`, the float32 patches it returns; `working`, the most it holds on top of them
// (the float32 planes of the whole image, the width pass of each resize, the resized levels).
struct PreprocessMemory {
  int64_t tiles = 0, working = 0;
};
PreprocessMemory preprocess_memory(int64_t width, int64_t height, const ProcessorConfig& config);

// The special tokens of the layout. row_col[(r-1)*max_grid + (c-1)] is <|img_row_r_col_c|>;
// -1 where the tokenizer lacks a token (image_token is required).
struct ImageMarkerIds {
  int32_t image_token = -1, image_start = -1, image_end = -1, thumbnail = -1;
  std::vector<int32_t> row_col;
  int max_grid = 10;
};

// Looks up "<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>" and
// "<|img_row_R_col_C|>" (R, C in 1..10). Throws if "<image>" is missing.
ImageMarkerIds resolve_image_markers(const std::function<std::optional<int32_t>(std::string_view)>& token_id_by_name);

// What one <image> placeholder expands to (use_image_special_tokens=True, the processor's default):
//   <|image_start|> [ <|img_row_r_col_c|> <image>×tile_tokens ]… [<|img_thumbnail|> <image>×thumb_tokens] <|image_end|>
// for a grid, <|image_start|> <image>×tokens <|image_end|> for one tile (no row/col or thumbnail
// markers). Throws if a marker it needs is missing, or if the count of <image> tokens would differ
// from the tiles' features (a 1×1 grid from min_tiles = 1, where transformers fails later too).
std::vector<int32_t> image_token_layout(const PreprocessedImage& image, const ImageMarkerIds& ids, int downsample_factor);

}  // namespace lfm::image
