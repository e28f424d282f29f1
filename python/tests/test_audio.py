"""API level 4 through the Python package: audio (LFM2-Audio). A clip as (samples, rate), as WAV
bytes and as a file gives transformers' greedy tokens (tests/data/audio, reference.json `prompt`);
LLM.transcribe asks as `lfm transcribe` does; a model without a speech encoder refuses audio."""
import json
import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import lfm

from conftest import DATA, FIXTURE

AUDIO = DATA / "audio" / "lfm2audio_tiny_a"
ROOT = Path(__file__).resolve().parents[2]


def clip(name):
    raw = (DATA / "audio" / "frontend" / "clips" / f"{name}.f32").read_bytes()
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def float_wav(samples, rate=16000):
    data = struct.pack(f"<{len(samples)}f", *samples)
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    return b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + \
        b"data" + struct.pack("<I", len(data)) + data


def prompt_case():
    ref = json.loads((AUDIO / "reference.json").read_text())
    ids, prev = [], None
    for t in ref["prompt"]["input_ids"]:
        if not (t == 133 and prev == 133):
            ids.append(t)
        prev = t
    return ids, [g["token"] for g in ref["prompt"]["greedy"]], ref["prompt"]["clip"]


@pytest.fixture(scope="module")
def audio_llm():
    with lfm.LLM(str(AUDIO), ctx_size=256, parallel=2) as m:
        yield m


def test_clips_as_pcm_bytes_and_files_give_the_reference_tokens(audio_llm, tmp_path):
    assert audio_llm.has_audio and audio_llm.audio_token == 133 and audio_llm.audio_sample_rate == 16000
    ids, greedy, name = prompt_case()
    samples = clip(name)
    wav = float_wav(samples)
    path = tmp_path / "clip.wav"
    path.write_bytes(wav)
    params = lfm.SamplingParams(max_tokens=len(greedy), ignore_eos=True)
    for c in [(samples, 16000), wav, str(path)]:
        out = audio_llm.generate({"prompt_token_ids": ids, "multi_modal_data": {"audio": c}}, params)[0]
        assert out.outputs[0].token_ids == greedy
        assert out.prompt_token_ids == ids


def test_bad_audio_is_refused_and_the_engine_goes_on(audio_llm):
    ids, greedy, name = prompt_case()
    params = lfm.SamplingParams(max_tokens=2, ignore_eos=True)
    with pytest.raises(lfm.LfmError, match="audio clip 0"):
        audio_llm.generate({"prompt_token_ids": ids, "multi_modal_data": {"audio": b"not audio"}}, params)
    with pytest.raises(lfm.LfmError, match="audio placeholders"):
        audio_llm.generate({"prompt_token_ids": ids + [133], "multi_modal_data": {"audio": (clip(name), 16000)}}, params)
    out = audio_llm.generate({"prompt_token_ids": ids, "multi_modal_data": {"audio": (clip(name), 16000)}}, params)
    assert out[0].outputs[0].token_ids == greedy[:2]


def test_a_text_model_refuses_audio():
    with lfm.LLM(str(FIXTURE), ctx_size=64) as m:
        assert not m.has_audio
        with pytest.raises(lfm.LfmError, match="speech encoder"):
            m.generate({"prompt_token_ids": [1, 133], "multi_modal_data": {"audio": (clip("min_320"), 16000)}})


def write_audio_model(d):
    """The tiny checkpoint with the synthetic tokenizer and LFM2's template (as the C++ tests'
    write_audio_model): the embedding table widened to the tokenizer's vocabulary."""
    tok = DATA / "tokenizer"
    shutil.copy(tok / "tokenizer.json", d / "tokenizer.json")
    shutil.copy(tok / "tokenizer_config.json", d / "tokenizer_config.json")
    shutil.copy(DATA / "assets" / "lfm2" / "LFM2-1.2B" / "chat_template.jinja", d / "chat_template.jinja")
    t = json.loads((tok / "tokenizer.json").read_text())
    vocab = 1 + max([*t["model"]["vocab"].values(), *(a["id"] for a in t["added_tokens"])])
    cfg = json.loads((AUDIO / "config.json").read_text())
    cfg["vocab_size"] = cfg["lfm"]["vocab_size"] = vocab
    (d / "config.json").write_text(json.dumps(cfg))
    raw = (AUDIO / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    rng = random.Random(58)
    tensors, out_header, offset = [], {}, 0
    for name, info in header.items():
        if name == "__metadata__":
            out_header[name] = info
            continue
        data = body[info["data_offsets"][0]:info["data_offsets"][1]]
        shape = list(info["shape"])
        if name == "model.lfm.embed_tokens.weight":
            extra = (vocab - shape[0]) * shape[1]
            data += struct.pack(f"<{extra}f", *(rng.gauss(0, 0.5) for _ in range(extra)))
            shape[0] = vocab
        out_header[name] = {"dtype": info["dtype"], "shape": shape, "data_offsets": [offset, offset + len(data)]}
        tensors.append(data)
        offset += len(data)
    h = json.dumps(out_header).encode()
    h += b" " * (-len(h) % 8)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + b"".join(tensors))


def test_transcribe_asks_as_the_cli_does(tmp_path):
    d = tmp_path / "audio"
    d.mkdir()
    write_audio_model(d)
    wav = tmp_path / "clip.wav"
    wav.write_bytes(float_wav(clip("sweep_1p0s")))
    with lfm.LLM(str(d), ctx_size=256, parallel=2) as m:
        one = m.transcribe(str(wav))
        both = m.transcribe([str(wav), wav.read_bytes()])
    assert isinstance(one, str) and both == [one, one]
    # The CLI built beside the library under test asks the same way and gets the same text.
    lfm_bin = Path(os.environ.get("LFM_LIBRARY", ROOT / "build" / "liblfm.so")).parent / "lfm"
    if lfm_bin.exists():
        r = subprocess.run([str(lfm_bin), "transcribe", "-m", str(d), str(wav), "--ctx-size", "256", "--json"],
                           capture_output=True, text=True, check=True)
        assert json.loads(r.stdout)["text"] == one
