// From decoded images to what the engine takes: each image preprocessed as the model's processor
// does it (image/lfm2vl_preprocess.h), its placeholder in the prompt expanded into the processor's
// token layout, and its tiles placed at their image tokens (ImageInput), with a content hash.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/image_input.h"
#include "image/image.h"
#include "image/lfm2vl_preprocess.h"

namespace lfm {

class Model;
class Tokenizer;

// The vision side of a model folder.
struct ImagePromptSetup {
  image::ProcessorConfig processor;
  image::ImageMarkerIds markers;
  int32_t image_token_id = -1;
};

// Reads the processor's settings from the model folder (processor_config.json, else
// preprocessor_config.json; LFM2-VL's defaults when neither is there) and resolves the layout's
// tokens with the tokenizer. Throws lfm::Error when the model has no vision tower, when the
// processor's patch size or downsample factor disagrees with the vision tower's, or when the
// tokenizer lacks "<image>".
ImagePromptSetup load_image_prompt_setup(const std::string& model_dir, const Model& model, const Tokenizer& tok);

struct ImagePrompt {
  std::vector<int32_t> ids;                               // the prompt with every image laid out
  std::vector<std::shared_ptr<const ImageInput>> images;  // for Request::images
};

// Replaces the i-th image token of `ids` (exactly one per image, in order) by image i's layout.
// Throws lfm::Error naming the counts when they differ.
ImagePrompt expand_images(std::span<const int32_t> ids, std::span<const image::Image> images,
                          const ImagePromptSetup& setup);

}  // namespace lfm
