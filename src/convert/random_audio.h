// Random LFM2-Audio checkpoints for `lfm gen-random --audio` (benchmarking and format tests only):
// an LFM2 backbone of a --shape under transformers' Lfm2AudioForConditionalGeneration layout with a
// FastConformer encoder, the adapter and the audio-output embedding llama.cpp's mmproj keeps
// (audio_embedding.*). Shapes with speech output (lfm2.5-audio, tiny) add the depthformer and the
// audio_detokenizer/ sub-folder (convert/random_audio_output.h). As a Hugging Face folder, or
// directly as llama.cpp's GGUF pair (backbone + lfm2a mmproj: speech input only) without the folder.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/gguf_export.h"
#include "convert/random_checkpoint.h"
#include "model/audio_config.h"

namespace lfm::gguf {

// "lfm2-audio": LFM2(.5)-Audio-1.5B's encoder (d 512, 17 blocks, 8 heads, FFN 2048, 128 mels,
// conv kernel 9, 256 subsampling channels; 8 codebooks of 2049 audio tokens), to go with
// --shape 1.2B; "lfm2.5-audio": the same plus LFM2.5-Audio's speech output; "tiny": d 64, 2 blocks,
// 4 heads, FFN 128, 8 channels, 2 codebooks of 16, a tiny speech output.
// llama.cpp's graph runs only d 512 (its position table is hard-coded 512 wide).
std::vector<std::string> random_audio_names();
// The encoder of an audio shape in front of a backbone of width text_hidden.
AudioConfig random_audio_encoder(const std::string& audio, int64_t text_hidden);
// Rows of the audio-output embedding (codebooks × audio vocabulary).
int64_t random_audio_embedding_rows(const std::string& audio);
// Codebooks per audio frame, and the audio vocabulary of each (codes + the end-of-audio code).
int64_t random_audio_codebooks(const std::string& audio);
int64_t random_audio_vocab(const std::string& audio);
// config.json of the checkpoint: the text config as the `lfm` dict, the encoder (Parakeet names),
// the preprocessor, audio_token_id 133; with speech output also the `depthformer` dict,
// audio_eos_token_id (the last audio token), audio_start/text_end ids 128/130 and the interleaved
// schedule 6 text / 12 audio.
nlohmann::json random_audio_config(const nlohmann::json& text, const std::string& audio);
// The encoder's folder tensors ("model.conformer.…", "model.audio_adapter_…",
// "model.audio_embedding.…"), BatchNorm running statistics included.
std::vector<ExpectedTensor> random_audio_tensors(const std::string& audio, int64_t text_hidden);

// RandomRowProducer with what an encoder needs to be non-degenerate: LayerNorm gains 1 (every
// "norm…" module), BatchNorm running_var ~ U(0.5, 1.5) (> 0), running_mean ~ U(-0.35, 0.35).
class AudioRandomRowProducer : public RowProducer {
 public:
  AudioRandomRowProducer(uint64_t seed, float branch_scale) : base_(seed, branch_scale) {}
  void rows(const ExpectedTensor& t, int64_t first_row, int64_t n_rows, float* out) override;

 private:
  RandomRowProducer base_;
};

// The pair's mmproj for opt.audio / opt.shape (the values a folder of the same seed holds, rounded
// through opt.hf_dtype as the folder stores them): F32 with gguf_type f32, else F16 matrices.
void write_random_audio_mmproj(const std::string& path, const RandomCheckpointOptions& opt);

}  // namespace lfm::gguf
