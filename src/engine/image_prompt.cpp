#include "engine/image_prompt.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/json_guard.h"
#include "engine/content_hash.h"
#include "model/model.h"
#include "model/vision_model.h"
#include "tokenizer/tokenizer.h"

namespace lfm {

namespace {

// SHA-256 of every tile's grid and patch values (content_hash.h).
uint64_t tiles_hash(const std::vector<ImageInput::Tile>& tiles) {
  ContentHash h("image");
  for (const ImageInput::Tile& t : tiles) {
    const int64_t grid[2] = {t.grid_h, t.grid_w};
    h.add(grid, sizeof(grid));
    h.add(std::span<const float>(t.patches));
  }
  return h.finish();
}

}  // namespace

ImagePromptSetup load_image_prompt_setup(const std::string& model_dir, const Model& model, const Tokenizer& tok) {
  namespace fs = std::filesystem;
  const VisionModel* vision = model.vision();
  LFM_CHECK(vision, "image: the model has no vision tower (images need an LFM2-VL checkpoint)");
  ImagePromptSetup s;
  const VisionConfig& vc = vision->config();
  // Without a processor config: LFM2-VL's defaults at the vision tower's patch size and factor,
  // normalised as the tower's file says (an mmproj GGUF records mean and std).
  s.processor.encoder_patch_size = static_cast<int>(vc.patch_size);
  s.processor.downsample_factor = static_cast<int>(vc.downsample_factor);
  for (int c = 0; c < 3; ++c) {
    s.processor.image_mean[c] = vc.image_mean[c];
    s.processor.image_std[c] = vc.image_std[c];
  }
  // A .gguf language model: the processor config may sit beside it.
  const fs::path dir = fs::is_regular_file(model_dir) ? fs::path(model_dir).parent_path() : fs::path(model_dir);
  for (const char* name : {"processor_config.json", "preprocessor_config.json"}) {
    const fs::path p = dir / name;
    if (!fs::is_regular_file(p)) continue;
    const std::string what = cat("image: '", p.string(), "'");
    try {
      s.processor = image::ProcessorConfig::from_json(parse_json(read_text_file(p.string(), "image:"), what));
    } catch (const Error& e) {
      fail(e.what(), " (in '", p.string(), "')");
    }
    break;
  }
  LFM_CHECK(s.processor.encoder_patch_size == vc.patch_size && s.processor.downsample_factor == vc.downsample_factor,
            "image: the processor's patch size ", s.processor.encoder_patch_size, " and downsample factor ",
            s.processor.downsample_factor, " differ from the vision tower's ", vc.patch_size, " and ",
            vc.downsample_factor);
  s.markers = image::resolve_image_markers([&](std::string_view name) { return tok.token_to_id(name); });
  s.image_token_id = vc.image_token_id;
  LFM_CHECK(s.markers.image_token == s.image_token_id, "image: the tokenizer's <image> is id ", s.markers.image_token,
            ", the model's image_token_id is ", s.image_token_id);
  return s;
}

ImagePrompt expand_images(std::span<const int32_t> ids, std::span<const image::Image> images,
                          const ImagePromptSetup& setup) {
  size_t placeholders = 0;
  for (int32_t t : ids) placeholders += t == setup.image_token_id ? 1 : 0;
  LFM_CHECK(placeholders == images.size(), "image: the prompt has ", placeholders, " image placeholders (id ",
            setup.image_token_id, ") for ", images.size(), " images; put exactly one where each image goes");
  ImagePrompt out;
  size_t next = 0;
  for (int32_t t : ids) {
    if (t != setup.image_token_id) {
      out.ids.push_back(t);
      continue;
    }
    const image::PreprocessedImage pre = image::preprocess(images[next++], setup.processor);
    const std::vector<int32_t> layout =
        image::image_token_layout(pre, setup.markers, setup.processor.downsample_factor);
    auto input = std::make_shared<ImageInput>();
    // Each tile's rows are the layout's next run of its many image tokens.
    const int64_t base = static_cast<int64_t>(out.ids.size());
    size_t i = 0;
    for (const image::ImageTile& src : pre.tiles) {
      while (i < layout.size() && layout[i] != setup.image_token_id) ++i;
      ImageInput::Tile t;
      t.grid_h = src.patches_h;
      t.grid_w = src.patches_w;
      t.patches = src.patches;
      t.position = base + static_cast<int64_t>(i);
      t.tokens = src.tokens(setup.processor.downsample_factor);
      LFM_CHECK(i + static_cast<size_t>(t.tokens) <= layout.size(), "image: the layout has room for fewer image tokens than the ",
                pre.tiles.size(), " tiles make");
      i += static_cast<size_t>(t.tokens);
      input->tiles.push_back(std::move(t));
    }
    input->hash = tiles_hash(input->tiles);
    out.ids.insert(out.ids.end(), layout.begin(), layout.end());
    out.images.push_back(std::move(input));
  }
  return out;
}

}  // namespace lfm
