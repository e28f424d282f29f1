#include "cli/image_args.h"

#include "core/error.h"
#include "image/image_memory.h"
#include "model/model.h"

namespace lfm::cli {

void add_image_option(CLI::App& app, std::vector<std::string>& files) {
  app.add_option("--image", files,
                 "Image file (JPEG, PNG, WebP; repeatable) for an LFM2-VL model: the model's image token "
                 "(<image> in text) stands once per image where it goes")
      ->check(CLI::ExistingFile);
}

void check_images_supported(const std::vector<std::string>& files, const Model& model) {
  LFM_CHECK(files.empty() || model.vision(), "--image: the model has no vision tower (images need an LFM2-VL "
            "checkpoint folder, or a .gguf language model with --mmproj)");
}

ImagePrompt prompt_with_images(std::vector<int32_t> ids, const std::vector<std::string>& files,
                               const std::string& model_dir, const Model& model, const Tokenizer* tok) {
  if (files.empty()) return {std::move(ids), {}};
  LFM_CHECK(tok, "--image needs the model's tokenizer (its image tokens)");
  const ImagePromptSetup setup = load_image_prompt_setup(model_dir, model, *tok);
  // Every file's header first: the images' memory is checked before any of them is decoded.
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<image::ImageHeader> headers;
  for (const std::string& f : files) {
    try {
      bytes.push_back(image::read_image_file(f));
      headers.push_back(image::read_image_header(bytes.back()));
    } catch (const Error& e) {
      fail("--image '", f, "': ", e.what());
    }
  }
  image::check_images_memory(headers, setup.processor, image::kDefaultRequestImageMemory, "--image",
                             "the per-request image memory limit");
  std::vector<image::Image> images;
  for (size_t i = 0; i < files.size(); ++i) {
    try {
      images.push_back(image::decode_image(bytes[i]));
    } catch (const Error& e) {
      fail("--image '", files[i], "': ", e.what());
    }
    bytes[i] = {};
  }
  return expand_images(ids, images, setup);
}

}  // namespace lfm::cli
