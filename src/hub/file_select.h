// Which files of a repository lfm needs: the safetensors checkpoint with its config and tokenizer
// files, or one GGUF (chosen by name or quant tag). Runs the same on the Hub's file list (online)
// and on a cached snapshot's files (offline), so both agree on what a reference means.
#pragma once

#include <string>
#include <vector>

#include "hub/model_ref.h"

namespace lfm::hub {

// What a command needs: everything to run the model, only config.json (`lfm info`), or only the
// tokenizer files (`lfm tokenize`, `lfm template`). A GGUF holds all three.
enum class Need { kModel, kConfig, kTokenizer };

struct Selection {
  bool gguf = false;
  std::vector<std::string> files;   // paths inside the repo to fetch (a GGUF: that one file)
  std::string sharded_index;        // "model.safetensors.index.json" when the shards it lists are needed too
};

// Throws HubError (kUsage) naming the repository and listing the choices when the reference does
// not pick exactly one thing, and when the repository holds nothing lfm can load.
Selection select_files(const std::vector<std::string>& listing, const ModelRef& ref, Need need);

// The quant tag of a GGUF file name: "LFM2-1.2B-Q4_K_M.gguf" → "Q4_K_M",
// "x-Q8_0-00001-of-00002.gguf" → "Q8_0" (the text after the last '-' or '.', split suffix removed).
std::string gguf_quant_tag(const std::string& filename);
// Whether a GGUF is one part of a split model ("-00001-of-00003.gguf").
bool is_split_gguf(const std::string& filename);

// The shard files a model.safetensors.index.json lists (its weight_map values, each once).
std::vector<std::string> index_shards(const std::string& index_json, const std::string& origin);

}  // namespace lfm::hub
