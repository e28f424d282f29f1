// Helpers for tests that run a model: one prompt through a fresh state cache, and greedy
// generation through the engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/state_plan.h"

namespace lfm {
class Tokenizer;
}

namespace lfm::test {

// A one-sequence plan of `ctx` tokens with float32 state (what transformers' float32 references
// keep), unless a type is given.
StatePlanOptions f32_plan(int64_t ctx = 128, int64_t block_tokens = 16);

// Logits of every position of `ids`, run as one prefill in a cache of its own: [n][vocab].
std::vector<std::vector<float>> prompt_logits(const Model& model, Backend& backend, const std::vector<int32_t>& ids,
                                              const StatePlanOptions& plan = f32_plan());

// A greedy request for n tokens that ignores end-of-sequence ids.
Request greedy_request(const std::vector<int32_t>& prompt, int64_t n);
// Every generated id of a request's stream (read to the end); throws when it ended in an error.
std::vector<int32_t> generated_ids(RequestStream& stream);

// Greedy generation of n tokens through the engine, end-of-sequence ids ignored; with a tokenizer,
// only ids it can decode are chosen.
std::vector<int32_t> greedy(const Model& model, Backend& backend, const std::vector<int32_t>& prompt, int64_t n,
                            const Tokenizer* tok = nullptr, const StatePlanOptions& plan = f32_plan());

// Writes a small random bf16 LFM2 (2 layers: conv, attention; d 32) into `dir` with the synthetic
// LFM2-style tokenizer of tests/data/tokenizer and the real LFM2-1.2B chat template: text in, text
// out, for plumbing tests (random weights say nothing about quality).
void write_text_model(const std::string& dir);

// Writes a "scripted" model into `dir` (with the same tokenizer and template as
// write_text_model): every layer's weights are zero, so the residual stream is the token's
// embedding, and the embeddings and output rows are set so that greedy decoding maps token
// `from` to `to` for each given pair (other tokens predict id 0). It lets server tests make a
// model emit exact text (a tool call, reasoning) without a trained checkpoint. At most 31 pairs.
void write_scripted_model(const std::string& dir, const std::vector<std::pair<int32_t, int32_t>>& next);

// Writes into `dir` the tiny transformers-made LFM2-Audio checkpoint of
// tests/data/audio/lfm2audio_tiny_a (its encoder, adapter and backbone as they are) with the
// synthetic tokenizer and chat template of write_text_model: the embedding table is widened to the
// tokenizer's vocabulary (the fixture's 256 rows kept, the rest random) so text can go in and out.
// For plumbing tests of the CLI, server, C API and Python (random weights say nothing about quality).
void write_audio_model(const std::string& dir);

}  // namespace lfm::test
