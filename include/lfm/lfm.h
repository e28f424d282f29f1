/* lfm — the C API of the LFM2 inference engine (C99; liblfm.so.0 / liblfm.a).
 *
 * ABI rules:
 *   - Every symbol starts with lfm_ (types lfm_, constants LFM_); the shared library exports
 *     nothing else (it is built with hidden visibility and a version script).
 *   - Handles (lfm_model, lfm_engine, lfm_request) are opaque pointers.
 *   - Every struct passed across the API begins with `size_t struct_size`, set by the caller to
 *     sizeof(the struct it was compiled with) (the *_init functions do it). New fields are only
 *     ever added at the end: the library reads or writes only the first struct_size bytes, and
 *     fields a caller's older struct lacks take their defaults. A field added later starts at
 *     or after the older sizeof, never in its tail padding (which an older caller's struct_size
 *     covers but does not set): the structs end without padding (4-byte fields come in pairs),
 *     except lfm_model_options, whose last 4 bytes stay unused. Fields marked [2] came with API
 *     level 2 (LFM_API_VERSION 2), those marked [3] with level 3 (retrievers: lfm_embed, lfm_rerank),
 *     those marked [4] with level 4 (audio input: LFM2-Audio), those marked [5] with level 5
 *     (speech output: LFM2-Audio).
 *   - Every function returns an lfm_status (LFM_OK is 0) and never aborts the process: a null
 *     handle or argument, bad JSON, a missing model, a request that cannot run are errors, and
 *     lfm_last_error() gives this thread's message for the last failing call.
 *   - The SONAME changes (liblfm.so.N) only when a change breaks these rules.
 *
 * Threads: models and engines may be used from any thread. Requests may be submitted from many
 * threads at once; one request's events are read by one thread at a time; lfm_request_cancel
 * may be called from any thread at any time before lfm_request_free.
 *
 * Lifetimes: an engine keeps its model alive (lfm_model_free may come first); a request keeps
 * its events after its engine is freed (lfm_engine_free cancels what is still running).
 */
#ifndef LFM_LFM_H
#define LFM_LFM_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define LFM_API
#elif defined(LFM_BUILDING_LIBRARY)
#define LFM_API __attribute__((visibility("default")))
#else
#define LFM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define LFM_API_VERSION 5 /* this header's API level (lfm_api_version() gives the library's) */

typedef enum lfm_status {
  LFM_OK = 0,
  LFM_ERR_INVALID_ARGUMENT = 1, /* a null handle or pointer, a bad value, bad JSON */
  LFM_ERR_LOAD = 2,             /* the model could not be found or loaded */
  LFM_ERR_UNSUPPORTED = 3,      /* e.g. tokenize with a model that ships no tokenizer */
  LFM_ERR_BUSY = 4,             /* the engine's queue is full: retry later */
  LFM_ERR_TIMEOUT = 5,          /* lfm_request_next: no event within the timeout */
  LFM_ERR_END = 6,              /* lfm_request_next: the stream's last event was already read */
  LFM_ERR_BUFFER_TOO_SMALL = 7, /* the size needed was stored; call again with a larger buffer */
  LFM_ERR_INTERNAL = 8          /* anything else (out of memory, a failure inside the engine) */
} lfm_status;

typedef struct lfm_model lfm_model;
typedef struct lfm_engine lfm_engine;
typedef struct lfm_request lfm_request;
typedef struct lfm_embeddings lfm_embeddings; /* [3] lfm_embed's results */

/* This thread's message for the last call that did not return LFM_OK ("" if none). Valid until
 * this thread's next failing call. */
LFM_API const char* lfm_last_error(void);
/* A fixed name for a status ("ok", "invalid argument", ...). */
LFM_API const char* lfm_status_name(lfm_status status);
LFM_API int lfm_api_version(void);
LFM_API const char* lfm_version(void); /* "0.1.0" */

/* ---- Models ------------------------------------------------------------------------------ */

typedef struct lfm_model_options {
  size_t struct_size;
  int32_t threads;        /* CPU threads; 0: one per core */
  const char* device;     /* "cpu", "cuda" or "auto" (a GPU when there is one); NULL: "cpu" */
  const char* mmproj;     /* LFM2-VL: llama.cpp's mmproj GGUF beside a .gguf model; NULL: none */
  int32_t bf16_activations; /* nonzero: BF16 weights multiply bf16-rounded activations */
} lfm_model_options;
LFM_API lfm_status lfm_model_options_init(lfm_model_options* options);

/* `path`: a Hugging Face folder, a .gguf file, or a Hub reference (owner/name[:QUANT][@rev],
 * downloaded once into the Hugging Face cache). `options` may be NULL (the defaults). */
LFM_API lfm_status lfm_model_load(const char* path, const lfm_model_options* options, lfm_model** out);
/* NULL is a no-op (LFM_OK), as free(NULL) is. */
LFM_API lfm_status lfm_model_free(lfm_model* model);

typedef struct lfm_model_info {
  size_t struct_size;
  int64_t vocab_size;     /* valid token ids are 0 .. vocab_size - 1 */
  int64_t n_layers;
  int64_t parameters;
  int32_t has_tokenizer;  /* tokenize / detokenize / text prompts work */
  int32_t has_chat_template;
  int32_t bos_token;      /* -1 when none */
  int32_t eos_token;      /* -1 when none */
  int32_t has_vision;     /* [2] an LFM2-VL model whose prompts take images (lfm_prompt.n_images) */
  int32_t image_token;    /* [2] the image placeholder's id ("<image>"), -1 when none */
  /* [3] can_generate: the model has a language-model head (engines run it; lfm_engine_create on
   * a retriever is LFM_ERR_UNSUPPORTED). retriever: an lfm_retriever, what the checkpoint's
   * sentence-transformers / PyLate files make it. embedding_dim: the width of lfm_embed's
   * vectors (ColBERT: its Dense width; a generative model: its hidden size); embedding_max_tokens:
   * the most ids one text may have as it enters the model (texts are cut to it, ids given must
   * fit). Both 0 when the model cannot embed (e.g. a mixture of experts). */
  int32_t can_generate;
  int32_t retriever;
  int64_t embedding_dim;
  int64_t embedding_max_tokens;
  /* [4] an LFM2-Audio model whose prompts take audio (lfm_prompt.n_audio), its audio
   * placeholder's id (-1 when none), the rate clips are resampled to, and the longest clip in
   * seconds the speech encoder's positions allow (0 when it takes no audio). */
  int32_t has_audio;
  int32_t audio_token;
  int32_t audio_sample_rate;
  int32_t audio_max_seconds;
  /* [5] can_speak: the model has speech output (its depth transformer: lfm_prompt.audio_out);
   * speech_waveform: it also turns frames into a waveform (its audio detokenizer: an
   * audio_detokenizer/ folder or the vocoder GGUF); speech_sample_rate: the waveform's rate (24000 Hz, mono);
   * speech_codebooks: the codes per audio frame;
   * speech_audio_vocab: codes are in [0, speech_audio_vocab) (the last is the end of audio). */
  int32_t can_speak;
  int32_t speech_waveform;
  int32_t speech_sample_rate;
  int32_t speech_codebooks;
  int32_t speech_audio_vocab;
  int32_t reserved5; /* 0 */
} lfm_model_info;
LFM_API lfm_status lfm_model_get_info(const lfm_model* model, lfm_model_info* out);

/* Text → ids. Stores the count in *n_ids; when it exceeds `capacity` (ids may be NULL with
 * capacity 0) returns LFM_ERR_BUFFER_TOO_SMALL and stores nothing else. `add_special`: the
 * tokenizer's BOS as it specifies. */
LFM_API lfm_status lfm_tokenize(const lfm_model* model, const char* text, int32_t add_special, int32_t* ids,
                                size_t capacity, size_t* n_ids);
/* Ids → UTF-8 text, NUL-terminated. Stores the length (without the NUL) in *length; when the
 * text and its NUL do not fit in `capacity` bytes returns LFM_ERR_BUFFER_TOO_SMALL. */
LFM_API lfm_status lfm_detokenize(const lfm_model* model, const int32_t* ids, size_t n_ids, int32_t skip_special,
                                  char* text, size_t capacity, size_t* length);
/* The model's chat template over `messages_json` (an OpenAI-style JSON array of messages) and
 * `tools_json` (a JSON array of tools, or NULL), with the generation prompt: the text, as
 * lfm_detokenize returns text. Image parts of user messages ({"type": "image"}, or
 * {"type": "image_url", ...}) render as the model's placeholder, once per image. */
LFM_API lfm_status lfm_apply_chat_template(const lfm_model* model, const char* messages_json, const char* tools_json,
                                           char* text, size_t capacity, size_t* length);
/* The same conversation as token ids: a chat request's prompt, except that each image part
 * stands as the image token once (submit these ids with the images to get the chat request). */
LFM_API lfm_status lfm_chat_tokens(const lfm_model* model, const char* messages_json, const char* tools_json,
                                   int32_t* ids, size_t capacity, size_t* n_ids);

/* ---- Engines ----------------------------------------------------------------------------- */

typedef struct lfm_engine_options {
  size_t struct_size;
  int64_t ctx_size;        /* most tokens per sequence; default 4096 */
  int32_t parallel;        /* requests running at once; default 1 (more wait in the queue) */
  const char* kv_type;     /* "f32", "f16", "bf16" or "auto" (NULL): the checkpoint's */
  int32_t prefix_cache;    /* nonzero (default): reuse the state of earlier prompts */
  int64_t batch_tokens;    /* most tokens per step; default 512 */
  int64_t kv_memory_bytes; /* KV pool budget; 0 (default): ctx_size x parallel tokens */
  /* [2] Speculative decoding. `draft_model`: a smaller (or quantized) model with the model's
   * tokenizer (folder, .gguf or Hub reference), loaded by the engine on the model's device, for
   * requests whose drafter is LFM_DRAFTER_MODEL; NULL (default): none. `draft_tokens`: the room
   * for drafted tokens a step verifies (0 to 256, default 8; each request's max_drafts is capped
   * by it): drafting and a grammar's jump-forward need it, a draft model needs at least 1. */
  const char* draft_model;
  int64_t draft_tokens;
} lfm_engine_options;
LFM_API lfm_status lfm_engine_options_init(lfm_engine_options* options);

/* Starts an engine (its scheduler thread) on `model`; `options` may be NULL. */
LFM_API lfm_status lfm_engine_create(lfm_model* model, const lfm_engine_options* options, lfm_engine** out);
/* Cancels every request not finished, waits for the scheduler to stop. NULL: a no-op. */
LFM_API lfm_status lfm_engine_free(lfm_engine* engine);

typedef struct lfm_engine_stats {
  size_t struct_size;
  int64_t running, waiting;
  int64_t finished, cancelled, failed, preemptions, steps;
  int64_t prompt_tokens, generated_tokens, cached_tokens;
  int64_t drafted_tokens, accepted_tokens; /* [2] speculative decoding, over finished steps */
} lfm_engine_stats;
LFM_API lfm_status lfm_engine_get_stats(const lfm_engine* engine, lfm_engine_stats* out);

/* ---- Requests ---------------------------------------------------------------------------- */

typedef struct lfm_sampling_params {
  size_t struct_size;
  float temperature;        /* 0 (default): greedy */
  int32_t top_k;            /* 0: off */
  float top_p;              /* 1: off */
  float min_p;              /* 0: off */
  float repetition_penalty; /* 1: off */
  float presence_penalty, frequency_penalty; /* 0: off */
  int32_t has_seed;         /* nonzero: `seed` fixes the draws; zero: a random seed */
  uint64_t seed;
  int64_t max_tokens;       /* most tokens generated; -1 (default): until the context is full */
  const char* const* stop;  /* stop strings (never part of the text); n_stop of them */
  size_t n_stop;
  int32_t ignore_eos;       /* nonzero: do not stop at end-of-sequence ids */
  int32_t logprobs;         /* nonzero: each token event carries the chosen token's logprob */
  /* [2] Structured output: at most one of json_schema, json_object, grammar and regex. Every
   * token keeps the text a prefix of what the constraint accepts (in every sampling mode), and
   * the request stops when nothing can follow. They need the model's tokenizer (else
   * LFM_ERR_UNSUPPORTED); a schema, grammar or regex that cannot be used is refused at submit
   * (LFM_ERR_INVALID_ARGUMENT, the message naming the field and the problem). As lfm serve's response_format / grammar / regex:
   *   json_schema  a JSON Schema (JSON text): JSON valid under it, properties in the schema's
   *                order (response_format {"type": "json_schema"}; docs/STATUS.md lists the
   *                keywords); schema_strict: OpenAI's strict mode (additionalProperties false by
   *                default, keywords that cannot be honoured are errors);
   *   json_object  nonzero: any JSON object (response_format {"type": "json_object"});
   *   grammar      GBNF text (llama.cpp's syntax, start rule `root`);
   *   regex        the whole output matches this regular expression.
   * schema_whitespace: with json_schema / json_object, (bounded) whitespace may appear between
   * tokens (default: compact JSON). no_jump_forward: the text the grammar forces is not drafted
   * (by default it is, verified in one step, within the engine's draft_tokens). */
  const char* json_schema;
  const char* grammar;
  const char* regex;
  int32_t json_object;
  int32_t schema_strict;
  int32_t schema_whitespace;
  int32_t no_jump_forward;
  /* [2] Speculative decoding: who drafts (lfm_drafter; LFM_DRAFTER_MODEL needs an engine with a
   * draft_model) and at most how many tokens per step (default 8, capped by the engine's
   * draft_tokens; it adapts to what is accepted). Greedy output is the same token for token as
   * without drafting; sampled output keeps its distribution. */
  int32_t drafter;
  int32_t max_drafts;
  /* [2] Added to the logits of these ids before sampling (n_logit_bias pairs; each value in
   * [-100, 100], as OpenAI's logit_bias). */
  const int32_t* logit_bias_ids;
  const float* logit_bias_values;
  size_t n_logit_bias;
  /* [2] 0 to 20: each token event also carries this many most likely alternatives and their
   * logprobs (the chosen token's logprob is then reported too). */
  int64_t top_logprobs;
} lfm_sampling_params;
LFM_API lfm_status lfm_sampling_params_init(lfm_sampling_params* params);

typedef enum lfm_drafter {
  LFM_DRAFTER_NONE = 0,
  LFM_DRAFTER_NGRAM = 1, /* prompt lookup: what followed the last tokens earlier in the request */
  LFM_DRAFTER_MODEL = 2  /* the engine's draft model (lfm_engine_options.draft_model) */
} lfm_drafter;

/* What to generate from: exactly one of prompt ids, prompt text, chat messages or (level 5)
 * speak_text. */
typedef struct lfm_prompt {
  size_t struct_size;
  const int32_t* ids;        /* token ids (n_ids of them) */
  size_t n_ids;
  const char* text;          /* text, tokenized with the model's tokenizer (BOS as it specifies) */
  const char* messages_json; /* a chat: JSON array of messages, through the model's template; */
  const char* tools_json;    /*   tools offered (JSON array) or NULL; the turn ends at <|im_end|> */
  /* [2] Images for an LFM2-VL model (JPEG, PNG or WebP), n_images of them, in order: image i is
   * the file image_paths[i] when image_paths is not NULL and that entry is not NULL, else the
   * encoded bytes image_data[i] (image_sizes[i] of them, read during the call only). Each image
   * stands where its placeholder is: in ids the image token (lfm_model_info.image_token) once per
   * image, in text "<image>" once per image; in messages the user messages' image parts, in
   * order: {"type": "image"} takes the next of these images, while an OpenAI part
   * {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} (or
   * {"type": "image", "url" | "image": "data:..."}) carries its own (data URIs only: paths go
   * through image_paths). Refused at submit: any image for a model without a vision tower
   * (LFM_ERR_UNSUPPORTED); an image that cannot be read or decoded, or placeholders that do not
   * match the images (LFM_ERR_INVALID_ARGUMENT, the message naming the image or the counts). */
  size_t n_images;
  const char* const* image_paths;
  const void* const* image_data;
  const size_t* image_sizes;
  /* [2] Chat only: "auto" (NULL, default), "none" (tools are not offered), "required" (the reply
   * starts with a tool call) or a function's name in tools_json (a call to it), as OpenAI's
   * tool_choice. With "required", a named function, or a tool whose function has "strict": true,
   * the calls' arguments are constrained to the parameters' JSON Schemas (as lfm serve does); a
   * schema that cannot be used is refused (LFM_ERR_INVALID_ARGUMENT naming tools[i]...). */
  const char* tool_choice;
  /* [4] Audio for an LFM2-Audio model, n_audio clips, in order: clip i is the file audio_paths[i]
   * when audio_paths is not NULL and that entry is not NULL; else the encoded bytes audio_data[i]
   * (audio_sizes[i] of them: WAV, FLAC, OGG/Vorbis/Opus or MP3; read during the call only) when
   * audio_data is not NULL and that entry is not NULL; else raw PCM: audio_pcm[i], holding
   * audio_pcm_frames[i] frames of audio_pcm_channels interleaved float32 samples at
   * audio_pcm_rate Hz. Every clip is down-mixed to mono and resampled to the model's rate
   * (lfm_model_info.audio_sample_rate). Each clip stands where its placeholder is: in ids the
   * audio token (lfm_model_info.audio_token) once per clip, in text "<audio>" once per clip; in
   * messages the user messages' {"type": "audio"} parts take the next of these clips, while an
   * OpenAI part {"type": "input_audio", "input_audio": {"data": base64, "format": "wav"}}
   * carries its own. Clips longer than max_audio_seconds (0: 600) are refused from their header.
   * Refused at submit: any clip for a model without a speech encoder (LFM_ERR_UNSUPPORTED); a
   * clip that cannot be read or decoded, or placeholders that do not match the clips
   * (LFM_ERR_INVALID_ARGUMENT, the message naming the clip or the counts). */
  size_t n_audio;
  const char* const* audio_paths;
  const void* const* audio_data;
  const size_t* audio_sizes;
  const float* const* audio_pcm;
  const size_t* audio_pcm_frames;
  int32_t audio_pcm_channels;
  int32_t audio_pcm_rate;
  double max_audio_seconds;
  /* [5] Speech output (a model with lfm_model_info.can_speak; else LFM_ERR_UNSUPPORTED):
   * audio_out (lfm_audio_out) makes the reply speak: LFM_AUDIO_OUT_SEQUENTIAL (text until the model
   * opens its audio, then frames until the end-of-audio frame, then text: TTS) or
   * LFM_AUDIO_OUT_INTERLEAVED (text and audio alternate: spoken chat). Each frame comes as an
   * LFM_EVENT_AUDIO event. Its codes are drawn with audio_temperature (0: greedy) over the
   * audio_top_k best (0: all), seeded by the sampling's seed; audio_waveform nonzero: events also
   * carry waveform samples (needs lfm_model_info.speech_waveform). Speech output cannot be drafted
   * or follow a grammar (LFM_ERR_INVALID_ARGUMENT). */
  int32_t audio_out;
  float audio_temperature;
  int32_t audio_top_k;
  int32_t audio_waveform;
  /* [5] Earlier spoken turns in an ids prompt: n_audio_frames runs of frames; run i is
   * audio_frames_count[i] consecutive prompt positions from audio_frames_position[i] on, each taking
   * a frame's codes from audio_frames_codes[i] ([count x speech_codebooks], row after row; read
   * during the call only) instead of its id's embedding. In order, not overlapping, inside the prompt. */
  size_t n_audio_frames;
  const int64_t* audio_frames_position;
  const int64_t* audio_frames_count;
  const int32_t* const* audio_frames_codes;
  /* [5] Text to speech: the prompt is the model's TTS turn for speak_text (instead of ids, text or
   * messages) in `voice` ("us_male", "us_female", "uk_male", "uk_female"; NULL: "us_female"), and
   * audio_out is LFM_AUDIO_OUT_SEQUENTIAL. With messages_json and LFM_AUDIO_OUT_INTERLEAVED, `voice`
   * (NULL: "us_female") goes into the spoken-chat system message added when the conversation has
   * none ("Respond with interleaved text and audio. Use the US female voice."). */
  const char* speak_text;
  const char* voice;
} lfm_prompt;

typedef enum lfm_audio_out {
  LFM_AUDIO_OUT_NONE = 0,
  LFM_AUDIO_OUT_SEQUENTIAL = 1,
  LFM_AUDIO_OUT_INTERLEAVED = 2
} lfm_audio_out;
LFM_API lfm_status lfm_prompt_init(lfm_prompt* prompt);

/* Queues a request; its events are read with lfm_request_next or lfm_request_run. `params` may
 * be NULL (greedy until the context is full). */
LFM_API lfm_status lfm_request_submit(lfm_engine* engine, const lfm_prompt* prompt, const lfm_sampling_params* params,
                                      lfm_request** out);

/* LFM_EVENT_AUDIO [5]: one audio frame of a request with audio_out (between its token events). */
typedef enum lfm_event_kind { LFM_EVENT_TOKEN = 1, LFM_EVENT_DONE = 2, LFM_EVENT_AUDIO = 3 } lfm_event_kind;
typedef enum lfm_finish_reason {
  LFM_FINISH_NONE = 0,
  LFM_FINISH_STOP = 1,      /* end-of-sequence, a stop id or a stop string */
  LFM_FINISH_LENGTH = 2,    /* max_tokens or the context */
  LFM_FINISH_CANCELLED = 3,
  LFM_FINISH_ERROR = 4      /* `error` says why */
} lfm_finish_reason;

typedef struct lfm_event {
  size_t struct_size;
  int32_t kind;            /* lfm_event_kind */
  /* LFM_EVENT_TOKEN: the id generated, the text that became final with it (may be empty), and
   * its logprob (when asked for). LFM_EVENT_DONE: token is -1, text is any remaining text. The
   * strings stay valid until the next lfm_request_next / lfm_request_free on this request. */
  int32_t token;
  const char* text;
  size_t text_length;
  float logprob;
  /* LFM_EVENT_DONE only. */
  int32_t finish_reason;   /* lfm_finish_reason */
  const char* stop;        /* the stop string that ended it, or "" */
  const char* error;       /* the error when finish_reason is LFM_FINISH_ERROR, or "" */
  int64_t prompt_tokens, completion_tokens, cached_tokens;
  double queue_seconds, first_token_seconds, total_seconds;
  /* [2] LFM_EVENT_DONE: speculative decoding's drafted tokens and, of those, accepted ones (also
   * a grammar's jump-forward drafts), and the image tiles the vision tower encoded. */
  int64_t drafted_tokens, accepted_tokens;
  int64_t image_tiles;
  /* [2] LFM_EVENT_DONE of a chat request: the reply parsed as lfm serve's /v1/chat/completions
   * parses it, an OpenAI assistant message as JSON text: {"role": "assistant", "content": ...,
   * "reasoning_content": ... (the <think> block, when there is one), "tool_calls": [{"id",
   * "type": "function", "function": {"name", "arguments": "<JSON text>"}}] (when the model called
   * tools)}; content is null when there are tool calls and no text. "" for other requests and
   * other events. Valid as `text` is. */
  const char* message_json;
  size_t message_json_length;
  /* [2] LFM_EVENT_TOKEN with top_logprobs asked for: the most likely ids and their logprobs,
   * n_top of each, most likely first. Valid as `text` is. */
  const int32_t* top_tokens;
  const float* top_logprobs;
  size_t n_top;
  /* [4] LFM_EVENT_DONE: the audio clips the speech encoder encoded (not found already encoded);
   * encode_seconds: the time the vision tower and speech encoder took (inside first_token_seconds). */
  int64_t audio_clips;
  double encode_seconds;
  /* [5] LFM_EVENT_AUDIO: the frame's codes (n_audio_codes = speech_codebooks; audio_end nonzero for
   * the end-of-audio frame, all its codes the end code) and the waveform samples that became final
   * with it (mono float at sample_rate Hz; none without audio_waveform). LFM_EVENT_DONE may carry
   * the waveform's last samples, and audio_frames (frames generated, the end-of-audio frame too) and
   * audio_seconds (the waveform's duration). Valid as `text` is; token is -1. */
  const int32_t* audio_codes;
  size_t n_audio_codes;
  const float* audio;
  size_t n_audio;
  int32_t audio_end;
  int32_t sample_rate;
  int64_t audio_frames;
  double audio_seconds;
} lfm_event;

/* The next event: waits up to timeout_ms (-1: as long as it takes; 0: just looks). Returns
 * LFM_ERR_TIMEOUT when none came, LFM_ERR_END once the LFM_EVENT_DONE event has been read, and
 * LFM_ERR_INVALID_ARGUMENT for a NULL event or one whose struct_size is not set (checked before
 * an event is taken: the call can be repeated and loses nothing). */
LFM_API lfm_status lfm_request_next(lfm_request* request, lfm_event* event, int32_t timeout_ms);

/* Called with each event in turn; a nonzero return cancels the request (its DONE event still
 * follows). */
typedef int32_t (*lfm_event_callback)(const lfm_event* event, void* user_data);
/* Reads the request's events on the calling thread until its DONE event, passing each to
 * `callback`. */
LFM_API lfm_status lfm_request_run(lfm_request* request, lfm_event_callback callback, void* user_data);

/* Asks the engine to stop the request (any thread); a DONE event with LFM_FINISH_CANCELLED
 * follows unless it had already ended. */
LFM_API lfm_status lfm_request_cancel(lfm_request* request);
/* Cancels it if still running and releases it. NULL: a no-op. */
LFM_API lfm_status lfm_request_free(lfm_request* request);

/* ---- Retrievers [3] ----------------------------------------------------------------------- */
/* LFM2.5-Embedding (one vector per text, scored by cosine) and the ColBERT models (one vector per
 * token, scored by MaxSim), run on a model handle (no engine), as their sentence-transformers /
 * PyLate files prescribe: the query or document prompt / prefix, truncation to the model's
 * lengths, query expansion, pooling, the Dense projection, normalisation, the skiplist. A text's
 * vectors are the same alone or with any other texts. Calls on one model take turns. Every limit
 * is checked before the model runs; a refused call changes nothing. */

typedef enum lfm_retriever {
  LFM_RETRIEVER_NONE = 0,    /* no sentence-transformers / PyLate files (e.g. a generative model) */
  LFM_RETRIEVER_DENSE = 1,   /* one pooled vector per text, cosine (LFM2.5-Embedding) */
  LFM_RETRIEVER_COLBERT = 2  /* one vector per token, MaxSim (LFM2.5-ColBERT, LFM2-ColBERT) */
} lfm_retriever;
typedef enum lfm_input_type {
  LFM_INPUT_NONE = 0,     /* the text as it is */
  LFM_INPUT_QUERY = 1,    /* the model's query prompt / prefix (ColBERT: expanded to its query length) */
  LFM_INPUT_DOCUMENT = 2  /* the model's document prompt / prefix (ColBERT: the skiplist applies) */
} lfm_input_type;
typedef enum lfm_pooling {
  LFM_POOLING_DEFAULT = 0, /* the model's own (a model that is no retriever has none: refused) */
  LFM_POOLING_CLS = 1,     /* the first token's vector */
  LFM_POOLING_MEAN = 2,
  LFM_POOLING_LAST = 3,
  LFM_POOLING_NONE = 4     /* one vector per token */
} lfm_pooling;

#define LFM_EMBED_MAX_TEXTS 4096        /* texts per lfm_embed call; documents per lfm_rerank call */
#define LFM_EMBED_MAX_TOKENS 1048576    /* ids entering the model per lfm_embed call, all texts together;
                                         * its vectors may take at most 1 GiB (rows x dim x 4 bytes) */

typedef struct lfm_embed_request {
  size_t struct_size;
  /* n_texts inputs (1 to LFM_EMBED_MAX_TEXTS), either all texts or all token ids:
   *   texts: UTF-8 (else LFM_ERR_INVALID_ARGUMENT naming texts[i] and the byte), text_lengths[i]
   *     bytes each, or NUL-terminated when text_lengths is NULL; they need the model's tokenizer
   *     (else LFM_ERR_UNSUPPORTED), take the input type's prompt / prefix and are cut to the
   *     model's length (lfm_embedding.truncated says so);
   *   ids: ids[i] holds n_ids[i] token ids, used as they are (no prompt, prefix, expansion or
   *     truncation): 1 to lfm_model_info.embedding_max_tokens of them, each in the vocabulary. */
  size_t n_texts;
  const char* const* texts;
  const size_t* text_lengths;
  const int32_t* const* ids;
  const size_t* n_ids;
  int32_t input_type; /* lfm_input_type (default LFM_INPUT_NONE) */
  /* lfm_pooling. A model that is no retriever embeds only when asked for a pooling: its final
   * hidden states, pooled, not normalised (LFM_POOLING_DEFAULT: LFM_ERR_UNSUPPORTED). A ColBERT
   * model keeps one vector per token (only DEFAULT or NONE). */
  int32_t pooling;
} lfm_embed_request;
LFM_API lfm_status lfm_embed_request_init(lfm_embed_request* request);

/* Embeds every input of the request; *out holds the results until lfm_embeddings_free. */
LFM_API lfm_status lfm_embed(lfm_model* model, const lfm_embed_request* request, lfm_embeddings** out);

typedef struct lfm_embedding {
  size_t struct_size;
  int64_t rows;          /* 1 (a pooled vector) or one per token */
  int64_t dim;           /* lfm_model_info.embedding_dim */
  const float* values;   /* rows x dim, row after row */
  const uint8_t* scored; /* per row, 1 where MaxSim reads it (a ColBERT document's skiplist zeroes
                          * punctuation); NULL: every row */
  const int32_t* ids;    /* the ids that entered the model (prompt, marker, expansion included) */
  size_t n_ids;
  int64_t input_tokens;  /* the text's own tokens, before prompt and truncation (usage) */
  int32_t truncated;     /* nonzero: the text was cut to the model's length */
  int32_t normalized;    /* nonzero: every row has unit L2 norm */
} lfm_embedding;
/* Input `index`'s result (0 to n_texts - 1); its pointers stay valid until lfm_embeddings_free. */
LFM_API lfm_status lfm_embeddings_get(const lfm_embeddings* embeddings, size_t index, lfm_embedding* out);
/* NULL: a no-op. */
LFM_API lfm_status lfm_embeddings_free(lfm_embeddings* embeddings);

typedef struct lfm_rerank_request {
  size_t struct_size;
  /* The query, one of: NUL-terminated UTF-8 text, or n_query_ids token ids (used as they are);
   * embedded as LFM_INPUT_QUERY. */
  const char* query;
  const int32_t* query_ids;
  size_t n_query_ids;
  /* n_documents documents (1 to LFM_EMBED_MAX_TEXTS), as lfm_embed_request's inputs (texts with
   * optional lengths, or ids), embedded as LFM_INPUT_DOCUMENT a group at a time (memory does not
   * grow with their number). */
  size_t n_documents;
  const char* const* documents;
  const size_t* document_lengths;
  const int32_t* const* document_ids;
  const size_t* n_document_ids;
} lfm_rerank_request;
LFM_API lfm_status lfm_rerank_request_init(lfm_rerank_request* request);

/* Each document's relevance to the query: MaxSim for ColBERT, the cosine for a dense model (a
 * model that is no retriever is LFM_ERR_UNSUPPORTED). scores[i] is document i's (n_documents of
 * them); `order`, when not NULL, receives the document indexes best first (ties: lower index
 * first). */
LFM_API lfm_status lfm_rerank(lfm_model* model, const lfm_rerank_request* request, double* scores, size_t* order);

#ifdef __cplusplus
}
#endif

#endif /* LFM_LFM_H */
