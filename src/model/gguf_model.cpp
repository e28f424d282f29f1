#include "model/gguf_model.h"

#include "core/error.h"
#include "model/audio_model.h"
#include "model/audio_mmproj.h"
#include "model/speech_out.h"
#include "model/vocoder_gguf.h"
#include "model/detokenizer.h"
#include "model/gguf_retrieval.h"
#include "model/mmproj.h"
#include "model/retrieval.h"
#include "model/model.h"
#include "model/vision_model.h"

namespace lfm {

// Opens a GGUF checkpoint: its metadata as the config, its tensors under HF names.
std::unique_ptr<Model> load_gguf_model(const std::string& path, const LoadOptions& options) {
  auto file = std::make_shared<const gguf::GgufFile>(path);
  ModelConfig cfg = gguf::config_from_gguf(*file);
  // The retriever's head is checked whether or not it is prepared (a convert reads it again). Its
  // Dense weights are copied out BEFORE the Model is made: the Model may let go of the file
  // (Model::detach_from_files), after which the tensor's pages read as zeros.
  std::optional<RetrievalConfig> head = gguf::retrieval_config_from_gguf(*file, cfg);
  std::shared_ptr<const TensorSource> dense = head && options.pack ? gguf::gguf_dense_source(*file) : nullptr;
  auto model = std::make_unique<Model>(cfg, std::make_unique<gguf::GgufTensorSource>(file), options);
  if (head && options.pack)
    model->set_retrieval(std::make_shared<RetrievalHead>(std::move(*head), std::move(dense), cfg.hidden_size, options.backend));
  if (!options.vocoder.empty() && options.pack) {
    // LFM2.5-Audio's speech output: llama.cpp's vocoder GGUF (model/vocoder_gguf.h).
    auto voc = std::make_shared<const gguf::GgufFile>(options.vocoder);
    const SpeechOutConfig sc = speech_out_config_from_vocoder(*voc, cfg.hidden_size);
    LFM_CHECK(sc.audio_start_id < cfg.vocab_size && sc.text_end_id < cfg.vocab_size, "vocoder: the audio start id ",
              sc.audio_start_id, " and text end id ", sc.text_end_id, " must be in the vocabulary of ", cfg.vocab_size);
    model->set_speech_out(std::make_shared<SpeechOutModel>(sc, vocoder_speech_out_source(voc), options.backend));
    if (vocoder_has_detokenizer(*voc))
      model->set_detokenizer(
          Detokenizer::load_source(detokenizer_config_from_vocoder(*voc), vocoder_detokenizer_source(voc), options));
  }
  if (!options.mmproj.empty() && options.pack) {
    auto mm = std::make_shared<const gguf::GgufFile>(options.mmproj);
    if (is_audio_mmproj(*mm)) {
      // LFM2-Audio: the speech encoder and adapter; the placeholder is LFM2's <|reserved_123|> (133).
      const int32_t audio_token = AudioConfig{}.audio_token_id;
      LFM_CHECK(audio_token < cfg.vocab_size, "mmproj: the audio token id ", audio_token, " is outside the vocabulary");
      const AudioConfig ac = audio_config_from_mmproj(*mm, cfg.hidden_size, audio_token);
      model->set_audio(std::make_shared<AudioModel>(ac, audio_mmproj_tensor_source(mm, ac), options.backend));
      return model;
    }
    // The image token is the language model's "<image>" (LFM2-VL's id 396 when the vocabulary
    // does not name it).
    int32_t image_token = 396;
    if (const gguf::Value* tokens = file->find("tokenizer.ggml.tokens"); tokens && tokens->type == gguf::ValueType::ARRAY)
      for (size_t i = 0; i < tokens->arr.size(); ++i)
        if (tokens->arr[i].type == gguf::ValueType::STRING && tokens->arr[i].str == "<image>") image_token = static_cast<int32_t>(i);
    LFM_CHECK(image_token < cfg.vocab_size, "mmproj: the image token id ", image_token, " is outside the vocabulary");
    const VisionConfig vc = vision_config_from_mmproj(*mm, cfg.hidden_size, image_token);
    model->set_vision(std::make_shared<VisionModel>(vc, mmproj_tensor_source(mm, vc), options.backend));
  }
  return model;
}

}  // namespace lfm
