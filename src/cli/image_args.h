// --image FILE (repeatable) for the commands that run a model: the files decoded, each one's
// placeholder (the model's image token, once per image, in the prompt's ids or text) expanded
// into the processor's layout, and the tiles handed to the engine (Request::images).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/image_prompt.h"

namespace lfm {
class Model;
class Tokenizer;
}  // namespace lfm

namespace lfm::cli {

void add_image_option(CLI::App& app, std::vector<std::string>& files);

// Throws when images are given to a model without a vision tower (before anything else is loaded).
void check_images_supported(const std::vector<std::string>& files, const Model& model);

// `ids` as they are when `files` is empty; else laid out with the images (see expand_images).
ImagePrompt prompt_with_images(std::vector<int32_t> ids, const std::vector<std::string>& files,
                               const std::string& model_dir, const Model& model, const Tokenizer* tok);

}  // namespace lfm::cli
