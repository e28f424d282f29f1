"""The Python API over liblfm: LLM, SamplingParams, outputs shaped like vLLM's offline API."""
from __future__ import annotations

import ctypes
import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

from . import _capi

_lib: Optional[ctypes.CDLL] = None
_lib_lock = threading.Lock()


def _library() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _capi.load_library()
        return _lib


class LfmError(RuntimeError):
    """An error the C API reported: `status` is its lfm_status, `message` its text."""

    def __init__(self, status: int, message: str):
        name = _library().lfm_status_name(status).decode()
        super().__init__(f"{message} ({name})")
        self.status = status
        self.message = message


def _check(status: int) -> None:
    if status != _capi.OK:
        raise LfmError(status, _library().lfm_last_error().decode("utf-8", "replace"))


# ctypes cuts a C string at its first NUL and wraps an integer into its field's width without a
# word (2**64 + 16 tokens would become 16): every value is checked here before it is converted.
_INT32 = (-2**31, 2**31 - 1)
_INT64 = (-2**63, 2**63 - 1)
_UINT64 = (0, 2**64 - 1)
_SIZE = (0, 2**63 - 1)


def _int(name: str, value: Any, bounds: tuple[int, int]) -> int:
    """`value` as an int within its C type's `bounds`; ValueError naming `name` otherwise."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    v = value.__index__()
    if not bounds[0] <= v <= bounds[1]:
        raise ValueError(f"{name} must be in [{bounds[0]}, {bounds[1]}], got {v}")
    return v


def _ints32(name: str, values: Sequence[Any]) -> Any:
    """A ctypes int32 array of `values` (at least one element), each checked."""
    checked = [_int(name, v, _INT32) for v in values]
    return (ctypes.c_int32 * max(1, len(checked)))(*checked)


def _cstr(name: str, value: Union[str, bytes, os.PathLike]) -> bytes:
    """`value` as a C string's bytes; ValueError naming `name` when it holds a NUL (C would stop there)."""
    b = os.fsencode(value) if isinstance(value, os.PathLike) else value.encode() if isinstance(value, str) else bytes(value)
    at = b.find(b"\0")
    if at >= 0:
        raise ValueError(f"{name} holds a NUL character at byte {at}: a C string would end there")
    return b


@dataclass
class SamplingParams:
    """Sampling as in vLLM: temperature 0 is greedy. `logprobs` (any value but None) reports the
    chosen token's logprob per token; N > 0 also the N most likely alternatives (`top_logprobs`).

    Structured output (at most one): `json_schema` (a dict or JSON text), `json_object`, `grammar`
    (GBNF), `regex`; `schema_strict` (OpenAI's strict mode), `schema_whitespace` (allow whitespace in
    the JSON), `jump_forward` (draft the text the grammar forces). `logit_bias`: {token id: bias}.
    Speculative decoding: `drafter` "ngram" (prompt lookup) or "model" (the LLM's draft_model), at
    most `max_drafts` tokens per step; greedy output is unchanged.

    Speech output (LFM2-Audio, LLM.can_speak): `audio_out` "interleaved" (spoken chat: text and
    audio alternate; a chat without a system message gets the spoken-chat one in `voice`) or
    "sequential" (text, then the audio the model opens, then text); each frame's codes drawn with
    `audio_temperature` (0: greedy) over the `audio_top_k` best (0: all); `audio_waveform`: frames
    also become waveform samples (LLM.speech_waveform). Streams then yield AudioEvents too."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: Optional[int] = None
    max_tokens: Optional[int] = 16  # None: until the context is full
    stop: Union[str, Sequence[str], None] = None
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    json_schema: Union[str, Mapping[str, Any], None] = None
    json_object: bool = False
    grammar: Optional[str] = None
    regex: Optional[str] = None
    schema_strict: bool = False
    schema_whitespace: bool = False
    jump_forward: bool = True
    logit_bias: Optional[Mapping[int, float]] = None
    drafter: Optional[str] = None
    max_drafts: int = 8
    audio_out: Optional[str] = None
    audio_temperature: float = 0.8
    audio_top_k: int = 4
    audio_waveform: bool = True
    voice: Optional[str] = None

    def _to_c(self) -> tuple[_capi.SamplingParamsC, Any]:
        c = _capi.SamplingParamsC()
        _check(_library().lfm_sampling_params_init(ctypes.byref(c)))
        c.temperature, c.top_k = self.temperature, _int("top_k", self.top_k, _INT32)
        c.top_p, c.min_p = self.top_p, self.min_p
        c.repetition_penalty = self.repetition_penalty
        c.presence_penalty, c.frequency_penalty = self.presence_penalty, self.frequency_penalty
        if self.seed is not None:
            c.has_seed, c.seed = 1, _int("seed", self.seed, _UINT64)
        c.max_tokens = -1 if self.max_tokens is None else _int("max_tokens", self.max_tokens, _INT64)
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        keep = (ctypes.c_char_p * max(1, len(stops)))(*[_cstr("stop", s) for s in stops])
        c.stop, c.n_stop = ctypes.cast(keep, ctypes.POINTER(ctypes.c_char_p)), len(stops)
        c.ignore_eos = int(self.ignore_eos)
        c.logprobs = int(self.logprobs is not None)
        c.top_logprobs = max(0, _int("logprobs", self.logprobs or 0, _INT64))
        held: list[Any] = [keep]
        if self.json_schema is not None:
            schema = self.json_schema if isinstance(self.json_schema, str) else json.dumps(self.json_schema)
            c.json_schema = _cstr("json_schema", schema)
        c.json_object = int(self.json_object)
        c.grammar = _cstr("grammar", self.grammar) if self.grammar is not None else None
        c.regex = _cstr("regex", self.regex) if self.regex is not None else None
        c.schema_strict, c.schema_whitespace = int(self.schema_strict), int(self.schema_whitespace)
        c.no_jump_forward = int(not self.jump_forward)
        if self.logit_bias:
            ids = _ints32("logit_bias token id", list(self.logit_bias))
            vals = (ctypes.c_float * len(self.logit_bias))(*[float(v) for v in self.logit_bias.values()])
            held += [ids, vals]
            c.logit_bias_ids = ctypes.cast(ids, _capi.c_int32_p)
            c.logit_bias_values = ctypes.cast(vals, _capi.c_float_p)
            c.n_logit_bias = len(self.logit_bias)
        drafter = self.drafter or "none"
        if drafter not in _capi.DRAFTERS:
            raise ValueError(f"drafter must be 'none', 'ngram' or 'model', got {self.drafter!r}")
        c.drafter, c.max_drafts = _capi.DRAFTERS[drafter], _int("max_drafts", self.max_drafts, _INT32)
        return c, held  # `held` keeps the strings and arrays alive while the call runs


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: Optional[list[float]]  # the chosen tokens' logprobs, when asked for
    finish_reason: Optional[str]     # "stop", "length", "cancelled"
    stop_reason: Optional[str] = None  # the stop string that ended it
    # logprobs=N > 0: per token, the N most likely ids and their logprobs.
    top_logprobs: Optional[list[dict[int, float]]] = None
    # Chat requests: the reply parsed as lfm serve's /v1/chat/completions parses it: {"role",
    # "content", "reasoning_content" (when the model reasoned), "tool_calls" (when it called tools)}.
    message: Optional[dict[str, Any]] = None
    # Speech output: the frames' codes ([codebooks] each, the end-of-audio frame too) and the
    # waveform (mono float samples at sample_rate Hz; empty without one).
    audio_codes: Optional[list[list[int]]] = None
    audio: Optional[list[float]] = None
    sample_rate: Optional[int] = None

    @property
    def cumulative_logprob(self) -> Optional[float]:
        return None if self.logprobs is None else float(sum(self.logprobs))


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: Optional[list[int]]
    outputs: list[CompletionOutput]
    finished: bool = True
    usage: dict[str, float] = field(default_factory=dict)


@dataclass
class TokenEvent:
    """One streamed token: its id, the text that became final with it, its logprob (or None)."""
    token_id: int
    text: str
    logprob: Optional[float]


@dataclass
class AudioEvent:
    """One streamed audio frame (speech output): its codes ([codebooks]; empty when the event only
    carries samples), whether it is the end-of-audio frame, and the waveform samples that became
    final with it (mono float at sample_rate Hz; empty without a waveform)."""
    codes: list[int]
    end: bool
    samples: list[float]
    sample_rate: int


PromptType = Union[str, Sequence[int], Mapping[str, Any]]


class Stream:
    """The events of one request: iterate for TokenEvents; afterwards `output` holds the whole
    CompletionOutput. cancel() may be called from any thread."""

    def __init__(self, handle: ctypes.c_void_p, index: int, want_logprobs: bool):
        self._h = handle
        self._lock = threading.Lock()
        self._index = index
        self._want_logprobs = want_logprobs
        self._text: list[str] = []
        self._ids: list[int] = []
        self._lps: list[float] = []
        self._tops: list[dict[int, float]] = []
        self._codes: list[list[int]] = []
        self._audio: list[float] = []
        self._rate = 0
        self._speaks = False
        self.output: Optional[CompletionOutput] = None
        self.usage: dict[str, float] = {}

    def __iter__(self) -> Iterator[Union[TokenEvent, AudioEvent]]:
        lib = _library()
        ev = _capi.Event()
        ev.struct_size = ctypes.sizeof(ev)
        while self.output is None:
            # A short wait in a loop (the GIL is released during it) keeps Ctrl-C working.
            status = lib.lfm_request_next(self._h, ctypes.byref(ev), 100)
            if status == _capi.ERR_TIMEOUT:
                continue
            _check(status)
            if ev.n_audio:
                samples = ev.audio[:ev.n_audio]
                self._audio += samples
                self._rate = ev.sample_rate or self._rate
            else:
                samples = []
            if ev.kind == _capi.EVENT_AUDIO:
                codes = ev.audio_codes[:ev.n_audio_codes] if ev.n_audio_codes else []
                if codes:
                    self._codes.append(codes)
                yield AudioEvent(codes, bool(ev.audio_end), samples, ev.sample_rate)
                continue
            text = ctypes.string_at(ev.text, ev.text_length).decode("utf-8", "replace") if ev.text_length else ""
            self._text.append(text)
            if ev.kind == _capi.EVENT_TOKEN:
                self._ids.append(ev.token)
                self._lps.append(ev.logprob)
                if ev.n_top:
                    self._tops.append({ev.top_tokens[i]: ev.top_logprobs[i] for i in range(ev.n_top)})
                yield TokenEvent(ev.token, text, ev.logprob if self._want_logprobs else None)
                continue
            reason = _capi.FINISH_REASONS.get(ev.finish_reason)
            self.usage = {"prompt_tokens": ev.prompt_tokens, "completion_tokens": ev.completion_tokens,
                          "cached_tokens": ev.cached_tokens, "first_token_seconds": ev.first_token_seconds,
                          "total_seconds": ev.total_seconds, "drafted_tokens": ev.drafted_tokens,
                          "accepted_tokens": ev.accepted_tokens, "image_tiles": ev.image_tiles,
                          "audio_clips": ev.audio_clips, "encode_seconds": ev.encode_seconds,
                          "audio_frames": ev.audio_frames, "audio_seconds": ev.audio_seconds}
            message = None
            if ev.message_json_length:
                message = json.loads(ctypes.string_at(ev.message_json, ev.message_json_length).decode("utf-8", "replace"))
            if reason == "error":
                self.close()
                raise LfmError(_capi.ERR_INTERNAL, (ev.error or b"").decode("utf-8", "replace"))
            self.output = CompletionOutput(self._index, "".join(self._text), self._ids,
                                           self._lps if self._want_logprobs else None, reason,
                                           (ev.stop or b"").decode() or None, self._tops or None, message)
            if self._speaks:
                self.output.audio_codes, self.output.audio = self._codes, self._audio
                self.output.sample_rate = self._rate or None
        self.close()

    def result(self) -> CompletionOutput:
        for _ in self:
            pass
        assert self.output is not None
        return self.output

    def cancel(self) -> None:
        with self._lock:
            if self._h:
                _check(_library().lfm_request_cancel(self._h))

    def close(self) -> None:
        with self._lock:
            if self._h:
                _library().lfm_request_free(self._h)
                self._h = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


ImageType = Union[str, "os.PathLike[str]", bytes]
# A clip: a path, the encoded bytes (WAV, FLAC, OGG/Vorbis/Opus, MP3), or raw PCM as
# (samples, sample_rate): float samples, mono (a flat sequence or 1-D array) or interleaved
# [frames, channels] (a 2-D array); resampled to the model's rate (LLM.audio_sample_rate).
AudioType = Union[str, "os.PathLike[str]", bytes, tuple]

# As engine/transcription.h asks LFM2-Audio for a transcript (transformers'
# Lfm2AudioProcessor.apply_transcription_request).
_TRANSCRIBE_SYSTEM = "Perform ASR."
_TRANSLATE_SYSTEM = "Perform ASR, then translate the speech into English."


class LLM:
    """A model and an engine running it. `model`: a Hugging Face folder, a .gguf file or a Hub
    reference. Options: threads, device ("cpu", "cuda", "auto"), mmproj, ctx_size, parallel,
    kv_type, prefix_cache, batch_tokens, kv_memory_bytes; draft_model (speculative decoding: a
    smaller model with the same tokenizer, for SamplingParams(drafter="model")) and draft_tokens
    (the room for drafts per step)."""

    def __init__(self, model: str, *, threads: int = 0, device: str = "cpu", mmproj: Optional[str] = None,
                 ctx_size: int = 4096, parallel: int = 4, kv_type: str = "auto", prefix_cache: bool = True,
                 batch_tokens: int = 512, kv_memory_bytes: int = 0, draft_model: Optional[str] = None,
                 draft_tokens: int = 8):
        lib = _library()
        self._model = ctypes.c_void_p()
        self._engine = ctypes.c_void_p()
        mo = _capi.ModelOptions()
        _check(lib.lfm_model_options_init(ctypes.byref(mo)))
        mo.threads, mo.device = _int("threads", threads, _INT32), _cstr("device", device)
        mo.mmproj = _cstr("mmproj", mmproj) if mmproj else None
        _check(lib.lfm_model_load(_cstr("model", str(model)), ctypes.byref(mo), ctypes.byref(self._model)))
        eo = _capi.EngineOptions()
        _check(lib.lfm_engine_options_init(ctypes.byref(eo)))
        eo.ctx_size, eo.parallel = _int("ctx_size", ctx_size, _INT64), _int("parallel", parallel, _INT32)
        eo.kv_type = _cstr("kv_type", kv_type)
        eo.prefix_cache, eo.batch_tokens = int(prefix_cache), _int("batch_tokens", batch_tokens, _INT64)
        eo.kv_memory_bytes = _int("kv_memory_bytes", kv_memory_bytes, _INT64)
        eo.draft_model = _cstr("draft_model", str(draft_model)) if draft_model else None
        eo.draft_tokens = _int("draft_tokens", draft_tokens, _INT64)
        info = _capi.ModelInfo()
        info.struct_size = ctypes.sizeof(info)
        try:
            _check(lib.lfm_model_get_info(self._model, ctypes.byref(info)))
            # A retriever has no engine: embed() and rerank() work, generation raises the reason.
            self._no_engine: Optional[LfmError] = None
            try:
                _check(lib.lfm_engine_create(self._model, ctypes.byref(eo), ctypes.byref(self._engine)))
            except LfmError as e:
                if info.can_generate or e.status != _capi.ERR_UNSUPPORTED:
                    raise
                self._no_engine = e
        except LfmError:
            self.close()
            raise
        self.vocab_size = info.vocab_size
        self.has_tokenizer = bool(info.has_tokenizer)
        self.has_vision = bool(info.has_vision)
        self.image_token = info.image_token if info.image_token >= 0 else None
        self.has_audio = bool(info.has_audio)
        self.audio_token = info.audio_token if info.audio_token >= 0 else None
        self.audio_sample_rate = info.audio_sample_rate or None
        # Speech output (LFM2-Audio with its depth transformer): codes per frame, their vocabulary,
        # and whether frames become a waveform (its detokenizer), at speech_sample_rate Hz.
        self.can_speak = bool(info.can_speak)
        self.speech_waveform = bool(info.speech_waveform)
        self.speech_sample_rate = info.speech_sample_rate or None
        self.speech_codebooks = info.speech_codebooks
        self.can_generate = bool(info.can_generate)
        # "dense" (one vector per text, cosine), "colbert" (one per token, MaxSim) or None.
        self.retriever = _capi.RETRIEVERS.get(info.retriever)
        self.embedding_dim = info.embedding_dim
        self._next_id = 0

    # ---- text -----------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return self._ids_call(lambda buf, cap, n: _library().lfm_tokenize(
            self._model, _cstr("text", text), int(add_special), buf, cap, n))

    def detokenize(self, ids: Sequence[int], skip_special: bool = False) -> str:
        arr = _ints32("token id", ids)
        return self._text_call(lambda buf, cap, n: _library().lfm_detokenize(
            self._model, arr, len(ids), int(skip_special), buf, cap, n))

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                            tools: Optional[Sequence[Mapping[str, Any]]] = None) -> str:
        m, t = json.dumps(list(messages)).encode(), json.dumps(list(tools)).encode() if tools else None
        return self._text_call(lambda buf, cap, n: _library().lfm_apply_chat_template(self._model, m, t, buf, cap, n))

    # ---- generation -----------------------------------------------------------------------

    def stream(self, prompt: PromptType = None, sampling_params: Optional[SamplingParams] = None, *,
               messages: Optional[Sequence[Mapping[str, Any]]] = None,
               tools: Optional[Sequence[Mapping[str, Any]]] = None, tool_choice: Optional[str] = None,
               images: Optional[Sequence[ImageType]] = None, audio: Optional[Sequence[AudioType]] = None) -> Stream:
        """Submits one request (a prompt, or chat `messages`) and returns its Stream."""
        return self._submit(prompt, messages, tools, sampling_params or SamplingParams(), 0, tool_choice, images, audio)

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Optional[SamplingParams] = None) -> list[RequestOutput]:
        """Prompts: a string, token ids, {"prompt_token_ids": [...]} / {"prompt": "..."}, or a
        list of them. All are submitted at once and run batched. An LFM2-VL model takes images as
        vLLM's {"prompt": ..., "multi_modal_data": {"image": IMAGE or [IMAGE, ...]}}, an image a
        path or the encoded bytes (JPEG, PNG, WebP), standing where the prompt has "<image>" (or
        the image token id, LLM.image_token) once per image. An LFM2-Audio model takes clips as
        {"prompt": ..., "multi_modal_data": {"audio": CLIP or [CLIP, ...]}} (see AudioType), each
        standing where the prompt has "<audio>" (or LLM.audio_token) once per clip."""
        single = isinstance(prompts, (str, Mapping)) or (
            isinstance(prompts, Sequence) and len(prompts) > 0 and isinstance(prompts[0], int))
        items = [prompts] if single else list(prompts)
        params = sampling_params or SamplingParams()
        streams = [self._submit(p, None, None, params, 0) for p in items]
        return [self._finish(s, p) for s, p in zip(streams, items)]

    def chat(self, messages: Union[Sequence[Mapping[str, Any]], Sequence[Sequence[Mapping[str, Any]]]],
             sampling_params: Optional[SamplingParams] = None,
             tools: Optional[Sequence[Mapping[str, Any]]] = None, *, tool_choice: Optional[str] = None,
             images: Optional[Sequence[ImageType]] = None,
             audio: Optional[Sequence[AudioType]] = None) -> list[RequestOutput]:
        """One conversation (a list of messages) or several, through the model's chat template.
        Each output's `message` is the reply parsed (content, reasoning_content, tool_calls).
        tool_choice: "auto", "none", "required" or a function's name. Images: user messages'
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} parts, or
        {"type": "image"} parts taking `images` (paths or bytes) in order. Audio (LFM2-Audio):
        {"type": "input_audio", "input_audio": {"data": base64, "format": "wav"}} parts, or
        {"type": "audio"} parts taking `audio` (see AudioType) in order."""
        convs = [messages] if messages and isinstance(messages[0], Mapping) else list(messages)
        params = sampling_params or SamplingParams()
        streams = [self._submit(None, c, tools, params, 0, tool_choice, images, audio) for c in convs]
        return [self._finish(s, None) for s in streams]

    def transcribe(self, audio: Union[AudioType, Sequence[AudioType]], *, prompt: Optional[str] = None,
                   translate: bool = False, sampling_params: Optional[SamplingParams] = None) -> Union[str, list[str]]:
        """Speech to text with an LFM2-Audio model, asked as `lfm transcribe` asks: one clip (a
        path, encoded bytes, or (samples, sample_rate)) gives its transcript, a list of clips a
        list of transcripts (run batched). `prompt`: text after the clip in the request
        (vocabulary, the previous segment); `translate`: ask for English."""
        single = not isinstance(audio, list)
        clips = [audio] if single else list(audio)
        user: list[dict[str, Any]] = [{"type": "audio"}]
        if prompt:
            user.append({"type": "text", "text": prompt})
        messages = [{"role": "system", "content": _TRANSLATE_SYSTEM if translate else _TRANSCRIBE_SYSTEM},
                    {"role": "user", "content": user}]
        params = sampling_params or SamplingParams(max_tokens=None)
        streams = [self._submit(None, messages, None, params, 0, None, None, [c]) for c in clips]
        texts = [self._finish(s, None).outputs[0].text.strip() for s in streams]
        return texts[0] if single else texts

    def speak(self, text: str, voice: str = "us_female", *, audio_temperature: float = 0.8, audio_top_k: int = 64,
              seed: Optional[int] = None, max_tokens: Optional[int] = None) -> tuple[list[float], int]:
        """Text to speech with an LFM2-Audio model (the checkpoints' TTS turn, "Perform TTS. Use the
        <voice> voice."): the waveform's mono float samples and their rate. voice: us_male,
        us_female, uk_male or uk_female. Audio sampling as llama.cpp's runner does TTS (0.8, top 64);
        text greedy. Needs a model whose frames become a waveform (LLM.speech_waveform)."""
        out = self.speak_stream(text, voice, audio_temperature=audio_temperature, audio_top_k=audio_top_k,
                                seed=seed, max_tokens=max_tokens).result()
        return out.audio or [], out.sample_rate or (self.speech_sample_rate or 0)

    def speak_stream(self, text: str, voice: str = "us_female", *, audio_temperature: float = 0.8,
                     audio_top_k: int = 64, seed: Optional[int] = None, max_tokens: Optional[int] = None,
                     waveform: bool = True) -> Stream:
        """LLM.speak as a Stream: its AudioEvents as frames come (waveform=False: codes only)."""
        params = SamplingParams(seed=seed, max_tokens=max_tokens, audio_out="sequential",
                                audio_temperature=audio_temperature, audio_top_k=audio_top_k,
                                audio_waveform=waveform, voice=voice)
        return self._submit(None, None, None, params, 0, speak_text=text)

    # ---- retrievers -----------------------------------------------------------------------

    def embed(self, texts: Union[str, Sequence[int], Sequence[str], Sequence[Sequence[int]]],
              input_type: Optional[str] = None, pooling: Optional[str] = None) -> list[list[Any]]:
        """Vectors of a retriever (LFM2.5-Embedding, the ColBERT models), one item per text, in order:
        a list of floats (one pooled vector, as sentence-transformers' encode) or, per token (ColBERT,
        or pooling="none"), a list of such rows (as PyLate's encode: a document's skiplisted tokens
        are left out). `texts`: a string, token ids, or a list of either (all strings or all ids;
        ids are used as they are). input_type: "query", "document" or None (the model's prompts /
        prefixes); pooling: "cls", "mean", "last", "none" or None (the model's; a model that is no
        retriever embeds only with one given)."""
        items = self._inputs(texts, "texts")
        r = _capi.EmbedRequest()
        _check(_library().lfm_embed_request_init(ctypes.byref(r)))
        keep = self._fill_inputs(items, "texts", r, "n_texts", "texts", "text_lengths", "ids", "n_ids")
        r.input_type = self._choice("input_type", input_type or "none", _capi.INPUT_TYPES)
        r.pooling = 0 if pooling is None else self._choice("pooling", pooling, _capi.POOLINGS)
        handle = ctypes.c_void_p()
        lib = _library()
        _check(lib.lfm_embed(self._live_model(), ctypes.byref(r), ctypes.byref(handle)))
        del keep
        try:
            out = []
            for i in range(len(items)):
                e = _capi.Embedding()
                e.struct_size = ctypes.sizeof(e)
                _check(lib.lfm_embeddings_get(handle, i, ctypes.byref(e)))
                flat = e.values[:e.rows * e.dim]
                rows = [flat[k * e.dim:(k + 1) * e.dim] for k in range(e.rows)]
                if e.scored:
                    rows = [row for k, row in enumerate(rows) if e.scored[k]]
                per_token = e.rows > 1 or bool(e.scored) or pooling == "none" or self.retriever == "colbert"
                out.append(rows if per_token else rows[0])
            return out
        finally:
            lib.lfm_embeddings_free(handle)

    def rerank(self, query: Union[str, Sequence[int]], documents: Sequence[Union[str, Sequence[int]]],
               top_n: Optional[int] = None) -> list[tuple[int, float]]:
        """(document index, relevance score) best first, the top_n best (None: all): MaxSim for a
        ColBERT model, the cosine for a dense one. The query and the documents are strings or token
        ids (used as they are), embedded as a query and as documents."""
        docs = self._inputs(documents, "documents", single_ok=False)
        r = _capi.RerankRequest()
        _check(_library().lfm_rerank_request_init(ctypes.byref(r)))
        keep = self._fill_inputs(docs, "documents", r, "n_documents", "documents", "document_lengths",
                                 "document_ids", "n_document_ids")
        if isinstance(query, str):
            r.query = _cstr("query", query)
        else:
            q = _ints32("query token id", list(query))
            keep.append(q)
            r.query_ids, r.n_query_ids = ctypes.cast(q, _capi.c_int32_p), len(query)
        n = len(docs)
        scores = (ctypes.c_double * max(1, n))()
        order = (ctypes.c_size_t * max(1, n))()
        _check(_library().lfm_rerank(self._live_model(), ctypes.byref(r), scores, order))
        ranked = [(int(order[k]), float(scores[order[k]])) for k in range(n)]
        return ranked if top_n is None else ranked[:max(0, _int("top_n", top_n, _SIZE))]

    def stats(self) -> dict[str, int]:
        if not self._engine and self._model and self._no_engine is not None:
            raise LfmError(self._no_engine.status, self._no_engine.message)
        st = _capi.EngineStats()
        st.struct_size = ctypes.sizeof(st)
        _check(_library().lfm_engine_get_stats(self._engine, ctypes.byref(st)))
        return {name: getattr(st, name) for name, _ in _capi.EngineStats._fields_[1:]}

    def close(self) -> None:
        lib = _library()
        if self._engine:
            lib.lfm_engine_free(self._engine)
            self._engine = ctypes.c_void_p()
        if self._model:
            lib.lfm_model_free(self._model)
            self._model = ctypes.c_void_p()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ---- internals ------------------------------------------------------------------------

    def _submit(self, prompt: PromptType, messages, tools, params: SamplingParams, index: int,
                tool_choice: Optional[str] = None, images: Optional[Sequence[ImageType]] = None,
                audio: Optional[Sequence[AudioType]] = None, speak_text: Optional[str] = None) -> Stream:
        if not self._engine:
            if self._model and self._no_engine is not None:
                raise LfmError(self._no_engine.status, self._no_engine.message)
            raise LfmError(_capi.ERR_INVALID_ARGUMENT, "the LLM is closed")
        p = _capi.Prompt()
        _check(_library().lfm_prompt_init(ctypes.byref(p)))
        keep: list[Any] = []
        if speak_text is not None:
            p.speak_text = _cstr("text", speak_text)
        elif messages is not None:
            p.messages_json = json.dumps(list(messages)).encode()
            p.tools_json = json.dumps(list(tools)).encode() if tools else None
            p.tool_choice = _cstr("tool_choice", tool_choice) if tool_choice else None
        else:
            if isinstance(prompt, Mapping):
                media = prompt.get("multi_modal_data") or {}
                if media.get("image") is not None:
                    images = media["image"] if isinstance(media["image"], (list, tuple)) else [media["image"]]
                if media.get("audio") is not None:
                    audio = media["audio"] if isinstance(media["audio"], list) else [media["audio"]]
                prompt = prompt["prompt_token_ids"] if "prompt_token_ids" in prompt else prompt["prompt"]
            if isinstance(prompt, str):
                p.text = _cstr("prompt", prompt)
            else:
                ids = _ints32("prompt token id", prompt)
                keep.append(ids)
                p.ids, p.n_ids = ctypes.cast(ids, _capi.c_int32_p), len(prompt)
        if images:
            self._attach_images(p, list(images), keep)
        if audio:
            self._attach_audio(p, list(audio), keep)
        if params.audio_out is not None:
            p.audio_out = self._choice("audio_out", params.audio_out, _capi.AUDIO_OUT)
            p.audio_temperature = params.audio_temperature
            p.audio_top_k = _int("audio_top_k", params.audio_top_k, _INT32)
            p.audio_waveform = int(params.audio_waveform)
            p.voice = _cstr("voice", params.voice) if params.voice else None
        c, strings = params._to_c()
        handle = ctypes.c_void_p()
        _check(_library().lfm_request_submit(self._engine, ctypes.byref(p), ctypes.byref(c), ctypes.byref(handle)))
        s = Stream(handle, index, params.logprobs is not None)
        s._speaks = params.audio_out not in (None, "none")
        return s

    @staticmethod
    def _attach_images(p: _capi.Prompt, images: list[ImageType], keep: list[Any]) -> None:
        """Each image a path (image_paths) or bytes (image_data); the arrays held in `keep`."""
        n = len(images)
        paths = (ctypes.c_char_p * n)()
        data = (ctypes.c_void_p * n)()
        sizes = (ctypes.c_size_t * n)()
        for i, im in enumerate(images):
            if isinstance(im, (bytes, bytearray, memoryview)):
                buf = ctypes.create_string_buffer(bytes(im), len(im))
                keep.append(buf)
                data[i], sizes[i] = ctypes.cast(buf, ctypes.c_void_p), len(im)
            else:
                paths[i] = _cstr(f"image path {i}", os.fsencode(im))
        keep += [paths, data, sizes]
        p.n_images = n
        p.image_paths = ctypes.cast(paths, ctypes.POINTER(ctypes.c_char_p))
        p.image_data = ctypes.cast(data, ctypes.POINTER(ctypes.c_void_p))
        p.image_sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_size_t))

    @staticmethod
    def _attach_audio(p: _capi.Prompt, clips: list[AudioType], keep: list[Any]) -> None:
        """Each clip a path (audio_paths), encoded bytes (audio_data) or (samples, rate) PCM
        (audio_pcm: every PCM clip of one request must share its rate and channel count)."""
        n = len(clips)
        paths = (ctypes.c_char_p * n)()
        data = (ctypes.c_void_p * n)()
        sizes = (ctypes.c_size_t * n)()
        pcm = (_capi.c_float_p * n)()
        frames = (ctypes.c_size_t * n)()
        layout: Optional[tuple[int, int]] = None
        for i, clip in enumerate(clips):
            if isinstance(clip, (bytes, bytearray, memoryview)):
                buf = ctypes.create_string_buffer(bytes(clip), len(clip))
                keep.append(buf)
                data[i], sizes[i] = ctypes.cast(buf, ctypes.c_void_p), len(clip)
            elif isinstance(clip, tuple):
                if len(clip) != 2:
                    raise ValueError(f"audio clip {i}: a PCM clip is (samples, sample_rate)")
                samples, rate = clip
                rate = _int(f"audio clip {i} sample_rate", rate, (1, 1 << 30))
                shape = getattr(samples, "shape", None)
                channels = int(shape[1]) if shape is not None and len(shape) == 2 else 1
                flat = samples.reshape(-1).tolist() if hasattr(samples, "reshape") else list(samples)
                if layout is not None and layout != (rate, channels):
                    raise ValueError("audio: PCM clips of one request must share their sample rate and channels")
                layout = (rate, channels)
                buf = (ctypes.c_float * len(flat))(*flat)
                keep.append(buf)
                pcm[i], frames[i] = ctypes.cast(buf, _capi.c_float_p), len(flat) // channels
            else:
                paths[i] = _cstr(f"audio path {i}", os.fsencode(clip))
        keep += [paths, data, sizes, pcm, frames]
        p.n_audio = n
        p.audio_paths = ctypes.cast(paths, ctypes.POINTER(ctypes.c_char_p))
        p.audio_data = ctypes.cast(data, ctypes.POINTER(ctypes.c_void_p))
        p.audio_sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_size_t))
        p.audio_pcm = ctypes.cast(pcm, ctypes.POINTER(_capi.c_float_p))
        p.audio_pcm_frames = ctypes.cast(frames, ctypes.POINTER(ctypes.c_size_t))
        if layout:
            p.audio_pcm_rate, p.audio_pcm_channels = layout

    def _finish(self, s: Stream, prompt: PromptType) -> RequestOutput:
        out = s.result()
        self._next_id += 1
        if isinstance(prompt, Mapping):
            prompt = prompt["prompt_token_ids"] if "prompt_token_ids" in prompt else prompt.get("prompt")
        text = prompt if isinstance(prompt, str) else None
        ids = list(prompt) if prompt is not None and not isinstance(prompt, str) else None
        return RequestOutput(str(self._next_id - 1), text, ids, [out], True, s.usage)

    def _live_model(self) -> ctypes.c_void_p:
        if not self._model:
            raise LfmError(_capi.ERR_INVALID_ARGUMENT, "the LLM is closed")
        return self._model

    @staticmethod
    def _choice(name: str, value: Any, choices: Mapping[str, int]) -> int:
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
        return choices[value]

    @staticmethod
    def _inputs(texts: Any, name: str, single_ok: bool = True) -> list[Union[str, list[int]]]:
        """A call's inputs: a list of strings or a list of id lists (a single one wrapped)."""
        if single_ok and (isinstance(texts, str) or (isinstance(texts, Sequence) and len(texts) > 0
                                                     and not isinstance(texts[0], (str, Sequence)))):
            texts = [texts]
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise ValueError(f"{name} must be a list of strings or of token id lists, got {type(texts).__name__}")
        items = [t if isinstance(t, str) else list(t) for t in texts]
        if len({isinstance(t, str) for t in items}) > 1:
            raise ValueError(f"{name} mixes strings and token ids: give one kind per call")
        return items

    @staticmethod
    def _fill_inputs(items: list, name: str, r: Any, n_field: str, texts_field: str, lengths_field: str,
                     ids_field: str, counts_field: str) -> list[Any]:
        """Points the request's fields at the inputs (texts with their lengths, or ids); returns
        what must stay alive while the call runs."""
        n = len(items)
        setattr(r, n_field, n)
        if n == 0:
            return []
        if isinstance(items[0], str):
            data = []
            for i, t in enumerate(items):
                try:
                    data.append(t.encode("utf-8"))
                except UnicodeEncodeError as e:
                    raise ValueError(f"{name}[{i}] is not valid Unicode text: {e}") from None
            ptrs = (ctypes.c_char_p * n)(*data)
            lengths = (ctypes.c_size_t * n)(*[len(b) for b in data])
            setattr(r, texts_field, ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_char_p)))
            setattr(r, lengths_field, ctypes.cast(lengths, ctypes.POINTER(ctypes.c_size_t)))
            return [data, ptrs, lengths]
        arrays = [_ints32(f"{name}[{i}] token id", t) for i, t in enumerate(items)]
        ptrs = (_capi.c_int32_p * n)(*[ctypes.cast(a, _capi.c_int32_p) for a in arrays])
        counts = (ctypes.c_size_t * n)(*[len(t) for t in items])
        setattr(r, ids_field, ctypes.cast(ptrs, ctypes.POINTER(_capi.c_int32_p)))
        setattr(r, counts_field, ctypes.cast(counts, ctypes.POINTER(ctypes.c_size_t)))
        return [arrays, ptrs, counts]

    def _ids_call(self, call) -> list[int]:
        n = ctypes.c_size_t()
        status = call(None, 0, ctypes.byref(n))
        if status not in (_capi.OK, _capi.ERR_BUFFER_TOO_SMALL):
            _check(status)
        buf = (ctypes.c_int32 * max(1, n.value))()
        _check(call(buf, n.value, ctypes.byref(n)))
        return list(buf[:n.value])

    def _text_call(self, call) -> str:
        n = ctypes.c_size_t()
        status = call(None, 0, ctypes.byref(n))
        if status != _capi.ERR_BUFFER_TOO_SMALL:
            _check(status)
        buf = ctypes.create_string_buffer(n.value + 1)
        _check(call(buf, n.value + 1, ctypes.byref(n)))
        return buf.raw[:n.value].decode("utf-8", "replace")
