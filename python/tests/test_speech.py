"""API level 5 through the Python package: speech output (LFM2-Audio). Streamed generation yields
AudioEvents whose codes are transformers' frames (tests/data/audio/lfm2audio_tts_tiny, reference.json
`generate`); LLM.speak_stream asks with the checkpoints' TTS turn in the voice given; an interleaved
chat gets the spoken-chat system message; a model that does not speak refuses."""
import json
import random
import shutil
import struct

import pytest

import lfm

from conftest import DATA, FIXTURE

TTS = DATA / "audio" / "lfm2audio_tts_tiny"


def frames_of(codes):
    """[codebooks][frames] -> [frames][codebooks]"""
    return [list(f) for f in zip(*codes)] if codes else []


def write_speech_model(d):
    """The TTS fixture with its audio detokenizer (tests/data/audio/detokenizer_tiny), the synthetic
    tokenizer (tests/data/tokenizer) and LFM2-1.2B's chat template: its embedding table widened to the tokenizer's vocabulary (the fixture's rows kept, the
    rest pseudo-random), as tests/model_test_util.cpp's write_speech_model does it."""
    tok = json.loads((DATA / "tokenizer" / "tokenizer.json").read_text())
    vocab = 1 + max(max(tok["model"]["vocab"].values()), max(a["id"] for a in tok["added_tokens"]))
    raw = (TTS / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    rng = random.Random(59)
    out_header, blobs, offset = {}, [], 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        data = raw[8 + n + begin:8 + n + end]
        shape = meta["shape"]
        if name == "model.lfm.embed_tokens.weight":
            extra = (vocab - shape[0]) * shape[1]
            data += struct.pack(f"<{extra}f", *[rng.uniform(-1.0, 1.0) for _ in range(extra)])
            shape = [vocab, shape[1]]
        out_header[name] = {"dtype": meta["dtype"], "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(out_header).encode()
    head += b" " * (-len(head) % 8)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for b in blobs:
            f.write(b)
    cfg = json.loads((TTS / "config.json").read_text())
    cfg["vocab_size"] = vocab
    cfg["lfm"]["vocab_size"] = vocab
    (d / "config.json").write_text(json.dumps(cfg))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DATA / "tokenizer" / f, d / f)
    shutil.copy(DATA / "assets" / "lfm2" / "LFM2-1.2B" / "chat_template.jinja", d / "chat_template.jinja")
    (d / "audio_detokenizer").mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(DATA / "audio" / "detokenizer_tiny" / f, d / "audio_detokenizer" / f)


@pytest.fixture(scope="module")
def tts_llm():
    with lfm.LLM(str(TTS), ctx_size=256, parallel=2) as m:
        yield m


@pytest.fixture(scope="module")
def speech_llm(tmp_path_factory):
    d = tmp_path_factory.mktemp("speech_model")
    write_speech_model(d)
    with lfm.LLM(str(d), ctx_size=512, parallel=2) as m:
        yield m


def collect(stream):
    tokens, frames, kinds, ends = [], [], [], 0
    for ev in stream:
        if isinstance(ev, lfm.AudioEvent):
            frames.append(ev.codes)
            kinds.append(3)
            ends += ev.end
            assert ev.samples == []  # codes only
        else:
            tokens.append(ev.token_id)
            kinds.append(1)
    return tokens, frames, kinds, ends


def test_model_info(tts_llm):
    assert tts_llm.can_speak and tts_llm.speech_codebooks == 8 and tts_llm.speech_sample_rate == 24000
    assert not tts_llm.has_tokenizer and tts_llm.speech_codebooks == 8


@pytest.mark.parametrize("name", ["seq_a", "inter_b"])
def test_streamed_frames_are_transformers(tts_llm, name):
    g = json.loads((TTS / "reference.json").read_text())["generate"][name]
    params = lfm.SamplingParams(max_tokens=g["max_new_tokens"], audio_out=g["generation_mode"], audio_temperature=0,
                                audio_waveform=False)
    s = tts_llm.stream(g["prompt_ids"], params)
    tokens, frames, kinds, ends = collect(s)
    assert tokens == g["sequences"]
    assert frames == frames_of(g["audio_codes"])
    assert kinds == g["modalities"]
    assert ends == len(g["end_of_audio_frames"])
    assert s.output.audio_codes == frames and s.output.audio == []
    assert s.usage["audio_frames"] == len(frames)


def test_speak_asks_with_the_tts_turn(speech_llm):
    s = speech_llm.speak_stream("Hello there.", "uk_male", max_tokens=12, seed=3, waveform=False)
    collect(s)
    want = speech_llm.tokenize(speech_llm.apply_chat_template(
        [{"role": "system", "content": "Perform TTS. Use the UK male voice."},
         {"role": "user", "content": "Hello there."}]), add_special=False)
    assert s.usage["prompt_tokens"] == len(want)
    assert s.output.audio_codes is not None
    with pytest.raises(lfm.LfmError, match="voice"):
        speech_llm.speak_stream("Hello.", "alloy")
    if speech_llm.speech_waveform:
        samples, rate = speech_llm.speak("Hello there.", max_tokens=12)
        assert rate == 24000 and isinstance(samples, list)
    else:
        with pytest.raises(lfm.LfmError, match="detokenizer"):
            speech_llm.speak("Hello there.", max_tokens=12)


def test_streamed_waveform(speech_llm):
    params = lfm.SamplingParams(max_tokens=30, seed=2, audio_out="interleaved")
    s = speech_llm.stream(messages=[{"role": "user", "content": "Hi."}], sampling_params=params)
    frames, ends, samples = 0, 0, 0
    for ev in s:
        if isinstance(ev, lfm.AudioEvent):
            frames += bool(ev.codes)
            ends += ev.end
            samples += len(ev.samples)
            assert not ev.samples or ev.sample_rate == 24000
    # The events' samples, and the waveform's tail with the DONE event: 1920 per frame in all.
    assert frames > 0 and len(s.output.audio) == 1920 * (frames - ends)
    assert samples <= len(s.output.audio) and s.output.sample_rate == 24000


def test_interleaved_chat_gets_the_spoken_chat_prompt(speech_llm):
    messages = [{"role": "user", "content": "Tell me something."}]
    params = lfm.SamplingParams(max_tokens=24, seed=1, audio_out="interleaved", audio_waveform=False, voice="us_male")
    s = speech_llm.stream(messages=messages, sampling_params=params)
    tokens, frames, kinds, _ = collect(s)
    want = speech_llm.tokenize(speech_llm.apply_chat_template(
        [{"role": "system", "content": "Respond with interleaved text and audio. Use the US male voice."}] + messages),
        add_special=False)
    assert s.usage["prompt_tokens"] == len(want)
    # Interleaved: six text steps first, then audio (unless the reply ended before).
    assert kinds[:6] == [1] * min(6, len(kinds))
    if len(kinds) > 6:
        assert kinds[6] == 3 and frames and all(len(f) == 8 for f in frames)


def test_a_model_that_does_not_speak_refuses():
    with lfm.LLM(str(FIXTURE), ctx_size=64, parallel=1) as m:
        assert not m.can_speak
        with pytest.raises(lfm.LfmError, match="speech output"):
            m.generate([1, 2, 3], lfm.SamplingParams(max_tokens=2, audio_out="interleaved"))
