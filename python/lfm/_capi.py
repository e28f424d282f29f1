"""ctypes declarations of include/lfm/lfm.h, and where liblfm.so is found.

ctypes, not a compiled extension: installing needs no compiler or Python headers, the package
works with any Python 3 the system has, and it binds the same stable C ABI every other user of
lfm links (structs versioned by size, so an older package keeps working with a newer library).
ctypes releases the GIL around every foreign call, so the engine runs while Python threads do.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_float_p = ctypes.POINTER(ctypes.c_float)

# Each class lists the C struct's fields in the header's order with the same types (fields added
# at API levels 2 and 3 last, as in lfm.h); python/tests checks them against include/lfm/lfm.h.


class ModelOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("threads", ctypes.c_int32), ("device", ctypes.c_char_p),
                ("mmproj", ctypes.c_char_p), ("bf16_activations", ctypes.c_int32)]


class ModelInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("vocab_size", ctypes.c_int64), ("n_layers", ctypes.c_int64),
                ("parameters", ctypes.c_int64), ("has_tokenizer", ctypes.c_int32),
                ("has_chat_template", ctypes.c_int32), ("bos_token", ctypes.c_int32), ("eos_token", ctypes.c_int32),
                ("has_vision", ctypes.c_int32), ("image_token", ctypes.c_int32),
                ("can_generate", ctypes.c_int32), ("retriever", ctypes.c_int32),
                ("embedding_dim", ctypes.c_int64), ("embedding_max_tokens", ctypes.c_int64),
                ("has_audio", ctypes.c_int32), ("audio_token", ctypes.c_int32),
                ("audio_sample_rate", ctypes.c_int32), ("audio_max_seconds", ctypes.c_int32),
                ("can_speak", ctypes.c_int32), ("speech_waveform", ctypes.c_int32),
                ("speech_sample_rate", ctypes.c_int32), ("speech_codebooks", ctypes.c_int32),
                ("speech_audio_vocab", ctypes.c_int32), ("reserved5", ctypes.c_int32)]


class EngineOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("ctx_size", ctypes.c_int64), ("parallel", ctypes.c_int32),
                ("kv_type", ctypes.c_char_p), ("prefix_cache", ctypes.c_int32), ("batch_tokens", ctypes.c_int64),
                ("kv_memory_bytes", ctypes.c_int64), ("draft_model", ctypes.c_char_p), ("draft_tokens", ctypes.c_int64)]


class EngineStats(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + [(n, ctypes.c_int64) for n in (
        "running", "waiting", "finished", "cancelled", "failed", "preemptions", "steps", "prompt_tokens",
        "generated_tokens", "cached_tokens", "drafted_tokens", "accepted_tokens")]


class SamplingParamsC(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float), ("repetition_penalty", ctypes.c_float),
                ("presence_penalty", ctypes.c_float), ("frequency_penalty", ctypes.c_float),
                ("has_seed", ctypes.c_int32), ("seed", ctypes.c_uint64), ("max_tokens", ctypes.c_int64),
                ("stop", ctypes.POINTER(ctypes.c_char_p)), ("n_stop", ctypes.c_size_t),
                ("ignore_eos", ctypes.c_int32), ("logprobs", ctypes.c_int32),
                ("json_schema", ctypes.c_char_p), ("grammar", ctypes.c_char_p), ("regex", ctypes.c_char_p),
                ("json_object", ctypes.c_int32), ("schema_strict", ctypes.c_int32),
                ("schema_whitespace", ctypes.c_int32), ("no_jump_forward", ctypes.c_int32),
                ("drafter", ctypes.c_int32), ("max_drafts", ctypes.c_int32),
                ("logit_bias_ids", c_int32_p), ("logit_bias_values", c_float_p), ("n_logit_bias", ctypes.c_size_t),
                ("top_logprobs", ctypes.c_int64)]


class Prompt(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("ids", c_int32_p), ("n_ids", ctypes.c_size_t),
                ("text", ctypes.c_char_p), ("messages_json", ctypes.c_char_p), ("tools_json", ctypes.c_char_p),
                ("n_images", ctypes.c_size_t), ("image_paths", ctypes.POINTER(ctypes.c_char_p)),
                ("image_data", ctypes.POINTER(ctypes.c_void_p)), ("image_sizes", ctypes.POINTER(ctypes.c_size_t)),
                ("tool_choice", ctypes.c_char_p),
                ("n_audio", ctypes.c_size_t), ("audio_paths", ctypes.POINTER(ctypes.c_char_p)),
                ("audio_data", ctypes.POINTER(ctypes.c_void_p)), ("audio_sizes", ctypes.POINTER(ctypes.c_size_t)),
                ("audio_pcm", ctypes.POINTER(c_float_p)), ("audio_pcm_frames", ctypes.POINTER(ctypes.c_size_t)),
                ("audio_pcm_channels", ctypes.c_int32), ("audio_pcm_rate", ctypes.c_int32),
                ("max_audio_seconds", ctypes.c_double),
                ("audio_out", ctypes.c_int32), ("audio_temperature", ctypes.c_float),
                ("audio_top_k", ctypes.c_int32), ("audio_waveform", ctypes.c_int32),
                ("n_audio_frames", ctypes.c_size_t), ("audio_frames_position", ctypes.POINTER(ctypes.c_int64)),
                ("audio_frames_count", ctypes.POINTER(ctypes.c_int64)),
                ("audio_frames_codes", ctypes.POINTER(c_int32_p)),
                ("speak_text", ctypes.c_char_p), ("voice", ctypes.c_char_p)]


class Event(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("kind", ctypes.c_int32), ("token", ctypes.c_int32),
                ("text", ctypes.c_void_p), ("text_length", ctypes.c_size_t), ("logprob", ctypes.c_float),
                ("finish_reason", ctypes.c_int32), ("stop", ctypes.c_char_p), ("error", ctypes.c_char_p),
                ("prompt_tokens", ctypes.c_int64), ("completion_tokens", ctypes.c_int64),
                ("cached_tokens", ctypes.c_int64), ("queue_seconds", ctypes.c_double),
                ("first_token_seconds", ctypes.c_double), ("total_seconds", ctypes.c_double),
                ("drafted_tokens", ctypes.c_int64), ("accepted_tokens", ctypes.c_int64), ("image_tiles", ctypes.c_int64),
                ("message_json", ctypes.c_void_p), ("message_json_length", ctypes.c_size_t),
                ("top_tokens", c_int32_p), ("top_logprobs", c_float_p), ("n_top", ctypes.c_size_t),
                ("audio_clips", ctypes.c_int64), ("encode_seconds", ctypes.c_double),
                ("audio_codes", c_int32_p), ("n_audio_codes", ctypes.c_size_t),
                ("audio", c_float_p), ("n_audio", ctypes.c_size_t),
                ("audio_end", ctypes.c_int32), ("sample_rate", ctypes.c_int32),
                ("audio_frames", ctypes.c_int64), ("audio_seconds", ctypes.c_double)]


class EmbedRequest(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("n_texts", ctypes.c_size_t),
                ("texts", ctypes.POINTER(ctypes.c_char_p)), ("text_lengths", ctypes.POINTER(ctypes.c_size_t)),
                ("ids", ctypes.POINTER(c_int32_p)), ("n_ids", ctypes.POINTER(ctypes.c_size_t)),
                ("input_type", ctypes.c_int32), ("pooling", ctypes.c_int32)]


class Embedding(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("rows", ctypes.c_int64), ("dim", ctypes.c_int64),
                ("values", c_float_p), ("scored", ctypes.POINTER(ctypes.c_uint8)), ("ids", c_int32_p),
                ("n_ids", ctypes.c_size_t), ("input_tokens", ctypes.c_int64), ("truncated", ctypes.c_int32),
                ("normalized", ctypes.c_int32)]


class RerankRequest(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("query", ctypes.c_char_p), ("query_ids", c_int32_p),
                ("n_query_ids", ctypes.c_size_t), ("n_documents", ctypes.c_size_t),
                ("documents", ctypes.POINTER(ctypes.c_char_p)), ("document_lengths", ctypes.POINTER(ctypes.c_size_t)),
                ("document_ids", ctypes.POINTER(c_int32_p)), ("n_document_ids", ctypes.POINTER(ctypes.c_size_t))]


OK, ERR_INVALID_ARGUMENT, ERR_LOAD, ERR_UNSUPPORTED, ERR_BUSY, ERR_TIMEOUT, ERR_END, ERR_BUFFER_TOO_SMALL, ERR_INTERNAL = range(9)
EVENT_TOKEN, EVENT_DONE, EVENT_AUDIO = 1, 2, 3
AUDIO_OUT = {"none": 0, "sequential": 1, "interleaved": 2}
FINISH_REASONS = {0: None, 1: "stop", 2: "length", 3: "cancelled", 4: "error"}
DRAFTERS = {"none": 0, "ngram": 1, "model": 2}
INPUT_TYPES = {"none": 0, "query": 1, "document": 2}
POOLINGS = {"cls": 1, "mean": 2, "last": 3, "none": 4}
RETRIEVERS = {0: None, 1: "dense", 2: "colbert"}

_P = ctypes.c_void_p
_SIGNATURES = {
    "lfm_last_error": ([], ctypes.c_char_p),
    "lfm_status_name": ([ctypes.c_int], ctypes.c_char_p),
    "lfm_api_version": ([], ctypes.c_int),
    "lfm_version": ([], ctypes.c_char_p),
    "lfm_model_options_init": ([ctypes.POINTER(ModelOptions)], ctypes.c_int),
    "lfm_model_load": ([ctypes.c_char_p, ctypes.POINTER(ModelOptions), ctypes.POINTER(_P)], ctypes.c_int),
    "lfm_model_free": ([_P], ctypes.c_int),
    "lfm_model_get_info": ([_P, ctypes.POINTER(ModelInfo)], ctypes.c_int),
    "lfm_tokenize": ([_P, ctypes.c_char_p, ctypes.c_int32, c_int32_p, ctypes.c_size_t,
                      ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "lfm_detokenize": ([_P, c_int32_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t,
                        ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "lfm_apply_chat_template": ([_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "lfm_chat_tokens": ([_P, ctypes.c_char_p, ctypes.c_char_p, c_int32_p, ctypes.c_size_t,
                         ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "lfm_engine_options_init": ([ctypes.POINTER(EngineOptions)], ctypes.c_int),
    "lfm_engine_create": ([_P, ctypes.POINTER(EngineOptions), ctypes.POINTER(_P)], ctypes.c_int),
    "lfm_engine_free": ([_P], ctypes.c_int),
    "lfm_engine_get_stats": ([_P, ctypes.POINTER(EngineStats)], ctypes.c_int),
    "lfm_sampling_params_init": ([ctypes.POINTER(SamplingParamsC)], ctypes.c_int),
    "lfm_prompt_init": ([ctypes.POINTER(Prompt)], ctypes.c_int),
    "lfm_request_submit": ([_P, ctypes.POINTER(Prompt), ctypes.POINTER(SamplingParamsC), ctypes.POINTER(_P)],
                           ctypes.c_int),
    "lfm_request_next": ([_P, ctypes.POINTER(Event), ctypes.c_int32], ctypes.c_int),
    "lfm_request_cancel": ([_P], ctypes.c_int),
    "lfm_request_free": ([_P], ctypes.c_int),
    "lfm_embed_request_init": ([ctypes.POINTER(EmbedRequest)], ctypes.c_int),
    "lfm_embed": ([_P, ctypes.POINTER(EmbedRequest), ctypes.POINTER(_P)], ctypes.c_int),
    "lfm_embeddings_get": ([_P, ctypes.c_size_t, ctypes.POINTER(Embedding)], ctypes.c_int),
    "lfm_embeddings_free": ([_P], ctypes.c_int),
    "lfm_rerank_request_init": ([ctypes.POINTER(RerankRequest)], ctypes.c_int),
    "lfm_rerank": ([_P, ctypes.POINTER(RerankRequest), ctypes.POINTER(ctypes.c_double),
                    ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
}


def _candidates() -> list[str]:
    env = os.environ.get("LFM_LIBRARY")
    if env:
        return [env]  # named explicitly: nothing else is tried
    out = []
    checkout = Path(__file__).resolve().parents[2]  # python/lfm/_capi.py → the checkout
    for build in ("build", "build-release"):
        p = checkout / build / "liblfm.so"
        if p.exists():
            out.append(str(p))
    found = ctypes.util.find_library("lfm")
    out += [found] if found else []
    out.append("liblfm.so.0")  # the dynamic loader's search path (an installed lfm)
    return out


def load_library() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise OSError("lfm: liblfm.so not found (build it with scripts/build.sh, or set LFM_LIBRARY to its path): "
                      + "; ".join(errors))
    for name, (args, res) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    return lib
