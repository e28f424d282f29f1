// Writing an LFM2 model as a GGUF that llama.cpp loads: llama.cpp's tensor names, ggml shapes and
// lfm2.* / lfm2moe.* metadata, the per-tensor type chosen by QuantPolicy, streamed tensor by tensor
// (peak memory is one chunk of rows, not the model). The weights come from a RowProducer that
// yields float32 rows of Hugging Face-named tensors: a checkpoint (safetensors or GGUF) for
// `lfm convert`, a seeded generator for `lfm gen-random`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "formats/gguf_reader.h"
#include "convert/quant_policy.h"
#include "model/config.h"
#include "model/retrieval.h"
#include "formats/tensor_source.h"
#include "model/weights.h"

namespace lfm::gguf {

// Produces float32 rows of a tensor given by its HF name and PyTorch shape. Rows run over the
// flattened leading dims; each row has shape.back() elements.
class RowProducer {
 public:
  virtual ~RowProducer() = default;
  virtual void rows(const ExpectedTensor& t, int64_t first_row, int64_t n_rows, float* out) = 0;
};

// Decodes rows of the tensors of a TensorSource (any stored dtype).
class SourceRowProducer : public RowProducer {
 public:
  explicit SourceRowProducer(const TensorSource& src) : src_(src) {}
  void rows(const ExpectedTensor& t, int64_t first_row, int64_t n_rows, float* out) override;

 private:
  const TensorSource& src_;
};

// The llama.cpp metadata for a config: general.*, <arch>.*, and tokenizer.ggml.{bos,eos,padding}
// token ids (the tokenizer's vocabulary comes separately, see tokenizer_metadata_*); a bidirectional
// backbone gets <arch>.attention.causal = false, as llama.cpp's converter writes it.
std::vector<std::pair<std::string, Value>> model_metadata(const ModelConfig& cfg, const std::string& name,
                                                          FileType ft);

struct ExportOptions {
  FileType type = FileType::F32;
  std::string name = "LFM2";  // general.name
  // Extra metadata (tokenizer.*, general.*), added after and overriding model_metadata().
  std::vector<std::pair<std::string, Value>> extra;
  // A retriever's head (model/gguf_retrieval.h): llama.cpp's pooling_type / embedding_length_out,
  // lfm's retrieval.* keys and, with a Dense projection, the tensor dense_2.weight read from
  // `dense` ("linear.weight" [out, d]).
  const RetrievalConfig* retrieval = nullptr;
  const TensorSource* dense = nullptr;
  bool progress = false;  // a progress bar on stderr (only drawn when stderr is a terminal)
  int threads = 0;        // quantization threads (0: hardware concurrency)
};

struct ExportStats {
  uint64_t file_bytes = 0;
  double seconds = 0;
  std::map<std::string, int64_t> type_counts;  // ggml type name → number of tensors
};

// Writes cfg + weights to `path` (atomically: a temporary file renamed at the end).
ExportStats write_gguf_model(const std::string& path, const ModelConfig& cfg, RowProducer& weights,
                             const ExportOptions& opt);

}  // namespace lfm::gguf
