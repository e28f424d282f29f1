#include "convert/gguf_export.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/gguf_names.h"
#include "model/gguf_retrieval.h"
#include "formats/gguf_writer.h"
#include "kernels/dequant.h"
#include "convert/quant.h"

namespace lfm::gguf {

namespace {

// One GGUF tensor: usually one HF tensor; for stacked experts, E of them in expert order.
struct Planned {
  std::string name;
  std::vector<int64_t> ne;  // ggml order
  DType type = DType::F32;
  std::vector<ExpectedTensor> parts;
  bool dense = false;  // rows come from ExportOptions::dense, not the model's weights
};

std::vector<Planned> plan_tensors(const ModelConfig& cfg, const QuantPolicy& policy, const ExportOptions& opt) {
  std::vector<Planned> plan;
  std::map<std::string, size_t> stacked;
  for (const ExpectedTensor& t : expected_tensors(cfg, cfg.has_lm_head && !cfg.tie_embeddings)) {
    int64_t expert = -1;
    const std::optional<std::string> g = gguf_name_from_hf(t.name, &expert);
    LFM_CHECK(g, "convert: no GGUF name for tensor '", t.name, "'");
    // ggml dims are the PyTorch shape reversed, without size-1 dims (conv [d, 1, K] → {K, d}).
    std::vector<int64_t> ne;
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
      if (*it != 1 || t.shape.size() == 1) ne.push_back(*it);
    if (expert >= 0) {
      auto it = stacked.find(*g);
      if (it != stacked.end()) {
        plan[it->second].parts.push_back(t);
        plan[it->second].ne.back() += 1;
        continue;
      }
      LFM_CHECK(expert == 0, "convert: experts of '", *g, "' are not listed in order");
      ne.push_back(1);  // {in, out, experts}: grows as the experts are appended
      stacked[*g] = plan.size();
    }
    plan.push_back({*g, std::move(ne), DType::F32, {t}});
  }
  if (opt.retrieval && opt.retrieval->dense_out > 0) {
    LFM_CHECK(opt.dense, "convert: the retriever has a Dense projection of width ", opt.retrieval->dense_out,
              " but no weights were given for it");
    const int64_t out = opt.retrieval->dense_out, d = cfg.hidden_size;
    plan.push_back({kDenseTensor, {d, out}, DType::F32, {ExpectedTensor{"linear.weight", {out, d}, true}}, true});
  }
  for (Planned& p : plan) p.type = policy.choose(p.name, p.ne);
  return plan;
}

class Progress {
 public:
  Progress(bool enabled, uint64_t total) : on_(enabled && isatty(fileno(stderr))), total_(total) {}
  void update(uint64_t done, const std::string& tensor) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    const int width = 30, filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '=');
    bar.resize(width, ' ');
    std::fprintf(stderr, "\r[%s] %5.1f%%  %8.1f / %.1f MiB  %-40.40s", bar.c_str(), 100.0 * frac, done / 1048576.0,
                 total_ / 1048576.0, tensor.c_str());
    if (done >= total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  bool on_;
  uint64_t total_;
  std::chrono::steady_clock::time_point last_{};
};

Value u32(int64_t v) {
  LFM_CHECK(v >= 0 && v <= 0xffffffffLL, "convert: value ", v, " does not fit a u32 metadata entry");
  return Value::of_u32(static_cast<uint32_t>(v));
}

}  // namespace

void SourceRowProducer::rows(const ExpectedTensor& t, int64_t first_row, int64_t n_rows, float* out) {
  const TensorView* v = src_.find(t.name);
  if (!v && t.name.size() > 24 && t.name.compare(t.name.size() - 24, 24, "feed_forward.expert_bias") == 0)
    v = src_.find(t.name + ".weight");
  LFM_CHECK(v, "convert: tensor '", t.name, "' is missing from ", src_.origin());
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;
  LFM_CHECK(v->numel() == numel, "convert: tensor '", t.name, "' has shape ", shape_str(v->shape), ", expected ",
            shape_str(t.shape));
  LFM_CHECK(dtype_decodable(v->dtype), "convert: tensor '", t.name, "' has type ", dtype_name(v->dtype),
            " which lfm cannot decode");
  const int64_t cols = t.shape.back();
  const size_t row_bytes = dtype_row_bytes(v->dtype, cols);
  const auto* base = static_cast<const uint8_t*>(v->data);
  for (int64_t r = 0; r < n_rows; ++r)
    dequantize_row(v->dtype, base + static_cast<size_t>(first_row + r) * row_bytes, out + r * cols, cols);
}

std::vector<std::pair<std::string, Value>> model_metadata(const ModelConfig& c, const std::string& name, FileType ft) {
  const std::string a = c.is_moe() ? "lfm2moe" : "lfm2";
  std::vector<std::pair<std::string, Value>> kv;
  kv.emplace_back("general.architecture", Value::of_string(a));
  kv.emplace_back("general.type", Value::of_string("model"));
  kv.emplace_back("general.name", Value::of_string(name));
  kv.emplace_back(a + ".block_count", u32(c.n_layers));
  kv.emplace_back(a + ".context_length", u32(c.max_position));
  kv.emplace_back(a + ".embedding_length", u32(c.hidden_size));
  kv.emplace_back(a + ".feed_forward_length", u32(c.ffn_dim));  // dense: the effective width F
  kv.emplace_back(a + ".attention.head_count", u32(c.n_heads));
  // Per-layer KV heads, 0 for conv layers: how llama.cpp tells the layer kinds apart.
  std::vector<Value> kv_heads;
  for (LayerKind k : c.layer_kinds) kv_heads.push_back(Value::of_i32(k == LayerKind::Attention ? static_cast<int32_t>(c.n_kv_heads) : 0));
  kv.emplace_back(a + ".attention.head_count_kv", Value::of_array(ValueType::I32, std::move(kv_heads)));
  if (c.head_dim * c.n_heads != c.hidden_size) {
    kv.emplace_back(a + ".attention.key_length", u32(c.head_dim));
    kv.emplace_back(a + ".attention.value_length", u32(c.head_dim));
  }
  kv.emplace_back(a + ".rope.freq_base", Value::of_f32(static_cast<float>(c.rope_theta)));
  kv.emplace_back(a + ".attention.layer_norm_rms_epsilon", Value::of_f32(c.norm_eps));
  kv.emplace_back(a + ".vocab_size", u32(c.vocab_size));
  kv.emplace_back(a + ".shortconv.l_cache", u32(c.conv_kernel));
  // llama.cpp reads it for every architecture: the bidirectional retrievers' attention and the
  // centred short conv (src/models/lfm2.cpp pads the conv window symmetrically when not causal).
  if (c.bidirectional) kv.emplace_back(a + ".attention.causal", Value::of_bool(false));
  if (c.is_moe()) {
    kv.emplace_back(a + ".expert_count", u32(c.n_experts));
    kv.emplace_back(a + ".expert_used_count", u32(c.n_experts_used));
    kv.emplace_back(a + ".expert_feed_forward_length", u32(c.moe_ffn_dim));
    kv.emplace_back(a + ".leading_dense_block_count", u32(c.n_dense_layers));
    kv.emplace_back(a + ".expert_gating_func", u32(2));  // sigmoid
    kv.emplace_back(a + ".expert_weights_norm", Value::of_bool(c.norm_topk_prob));
    if (c.routed_scaling_factor != 1.0f)
      kv.emplace_back(a + ".expert_weights_scale", Value::of_f32(c.routed_scaling_factor));
  }
  kv.emplace_back("general.file_type", u32(static_cast<int64_t>(ft)));
  kv.emplace_back("general.quantization_version", u32(2));
  kv.emplace_back("tokenizer.ggml.bos_token_id", u32(c.bos_token_id));
  if (!c.eos_token_ids.empty()) kv.emplace_back("tokenizer.ggml.eos_token_id", u32(c.eos_token_ids[0]));
  if (c.eos_token_ids.size() > 1) kv.emplace_back("tokenizer.ggml.eot_token_id", u32(c.eos_token_ids[1]));
  kv.emplace_back("tokenizer.ggml.padding_token_id", u32(c.pad_token_id));
  return kv;
}

ExportStats write_gguf_model(const std::string& path, const ModelConfig& cfg, RowProducer& weights,
                             const ExportOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const QuantPolicy policy(opt.type, cfg);
  const std::vector<Planned> plan = plan_tensors(cfg, policy, opt);
  for (const Planned& p : plan)
    LFM_CHECK(dtype_encodable(p.type), "convert: tensor '", p.name, "' needs type ", dtype_name(p.type),
              " for which lfm has no encoder");

  GgufWriter w;
  for (auto& [k, v] : model_metadata(cfg, opt.name, opt.type)) w.set(k, v);
  if (opt.retrieval)
    for (auto& [k, v] : retrieval_metadata(*opt.retrieval, cfg.is_moe() ? "lfm2moe" : "lfm2")) w.set(k, v);
  // A file without a vocabulary must still name a tokenizer model for llama.cpp ("none").
  if (!w.get("tokenizer.ggml.model")) {
    bool has = false;
    for (const auto& [k, v] : opt.extra) has |= k == "tokenizer.ggml.model";
    if (!has) w.set("tokenizer.ggml.model", Value::of_string("none"));
  }
  for (const auto& [k, v] : opt.extra) w.set(k, v);
  ExportStats stats;
  for (const Planned& p : plan) {
    w.add_tensor(p.name, p.ne, p.type);
    stats.type_counts[dtype_name(p.type)] += 1;
  }
  w.begin(path);

  std::unique_ptr<SourceRowProducer> dense_rows;
  if (opt.dense) dense_rows = std::make_unique<SourceRowProducer>(*opt.dense);
  ThreadPool pool(opt.threads);
  Progress progress(opt.progress, w.total_data_bytes());
  uint64_t done = 0;
  std::vector<float> f32;
  std::vector<uint8_t> bytes;
  for (const Planned& p : plan) {
    for (const ExpectedTensor& part : p.parts) {
      const int64_t cols = part.shape.back();
      int64_t rows = 1;
      for (size_t k = 0; k + 1 < part.shape.size(); ++k) rows *= part.shape[k];
      const size_t row_bytes = dtype_row_bytes(p.type, cols);
      // Chunks of about 4M floats (16 MiB) keep memory flat whatever the tensor size.
      const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t{1} << 22) / cols));
      f32.resize(static_cast<size_t>(chunk * cols));
      bytes.resize(static_cast<size_t>(chunk) * row_bytes);
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t n = std::min(chunk, rows - r0);
        (p.dense ? *dense_rows : weights).rows(part, r0, n, f32.data());
        pool.parallel_for(n, 16, [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r)
            quantize_row(p.type, f32.data() + r * cols, bytes.data() + static_cast<size_t>(r) * row_bytes, cols);
        });
        w.write(bytes.data(), static_cast<size_t>(n) * row_bytes);
        done += static_cast<uint64_t>(n) * row_bytes;
        progress.update(done, p.name);
      }
    }
  }
  w.finish();
  progress.update(w.total_data_bytes(), "done");
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f) {
    std::fseek(f, 0, SEEK_END);
    stats.file_bytes = static_cast<uint64_t>(std::ftell(f));
    std::fclose(f);
  }
  return stats;
}

}  // namespace lfm::gguf
