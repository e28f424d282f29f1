#!/usr/bin/env python3
"""Regenerates tests/data/audio: golden fixtures for the LFM2-Audio / LFM2.5-Audio speech-input path (issue 58),
made by the Hugging Face transformers code.

    /usr/bin/python3 tools/audio_reference/make_audio_fixtures.py [--out tests/data/audio]
        [--hf-ref ../shared/tools/hf_reference] [--overlay $HF_REF_ROOT/overlay/lfm2_audio]

- frontend/: transformers' `Lfm2AudioFeatureExtractor` on synthetic 16 kHz mono float32 clips: normalised log-mel
  features, attention mask, the raw (un-normalised) log-mel, the mel filter matrix, T and N per clip.
- lfm2audio_tiny_a/, lfm2audio_tiny_b/: tiny random `Lfm2AudioForConditionalGeneration` checkpoints (save_pretrained,
  reloaded with from_pretrained and checked bit for bit): encoder output and adapter rows per clip, ASR-prompt logits
  at every position and greedy tokens, a two-clip prompt, and the NaN finding for padded multi-clip batches.
- models/lfm2_audio (feature_extraction_lfm2_audio.py, modeling_lfm2_audio.py) is newer than v5.2.0: laid over the
  v5.2.0 tree unmodified (checked by SHA-256), with the config classes restated in ./configuration_lfm2_audio.py.

- transformers v5.2.0 from ../shared/tools/hf_reference (`hfenv.setup("5.2.0")` + vl_compat), Debian's
  /usr/bin/python3 (torch 1.13.1), float32, CPU, one thread.  Nothing from transformers is stored in the repository.
- librosa is not installed here: `librosa.filters.mel` (the only librosa call the extractor makes) is restated in
  this script from librosa 0.11 (filters.mel, core/convert.py hz_to_mel / mel_to_hz / mel_frequencies /
  fft_frequencies) and registered as a stand-in `librosa` module; listed in provenance.compat_shims.
- Deterministic: two runs give identical files.
"""
import argparse
import hashlib
import importlib.machinery
import json
import os
import shutil
import sys
import tempfile
import time
import types

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "audio"))
ap.add_argument("--hf-ref", default=os.path.join(REPO, "..", "shared", "tools", "hf_reference"))
ap.add_argument("--overlay", default=None, help="folder with the upstream lfm2_audio files "
                "(default: $HF_REF_ROOT/overlay/lfm2_audio)")
ARGS = ap.parse_args()
if not os.path.isdir(ARGS.hf_ref) and os.path.isdir("/work/shared/tools/hf_reference"):  # a git worktree elsewhere
    ARGS.hf_ref = "/work/shared/tools/hf_reference"


# ------------------------------------------------------------------------------------------------------------------
# librosa stand-in: filters.mel restated from librosa 0.11 (librosa/filters.py `mel`, librosa/core/convert.py
# `fft_frequencies`, `mel_frequencies`, `hz_to_mel`, `mel_to_hz`), Slaney scale and Slaney area normalisation only.
LIBROSA_VERSION = "0.11.0 (restated: filters.mel only)"
LIBROSA_SOURCES = {"librosa/filters.py": "dd3639de35ae442cf5761f336a2efee47ad8a65d",
                   "librosa/core/convert.py": "3152728293267484581171e95737cc831c1c1db9"}


def _hz_to_mel(frequencies, htk=False):
    assert not htk
    frequencies = np.asanyarray(frequencies)
    f_min = 0.0
    f_sp = 200.0 / 3
    mels = (frequencies - f_min) / f_sp
    min_log_hz = 1000.0
    min_log_mel = (min_log_hz - f_min) / f_sp
    logstep = np.log(6.4) / 27.0
    if frequencies.ndim:
        log_t = frequencies >= min_log_hz
        mels[log_t] = min_log_mel + np.log(frequencies[log_t] / min_log_hz) / logstep
    elif frequencies >= min_log_hz:
        mels = min_log_mel + np.log(frequencies / min_log_hz) / logstep
    return mels


def _mel_to_hz(mels, htk=False):
    assert not htk
    mels = np.asanyarray(mels)
    f_min = 0.0
    f_sp = 200.0 / 3
    freqs = f_min + f_sp * mels
    min_log_hz = 1000.0
    min_log_mel = (min_log_hz - f_min) / f_sp
    logstep = np.log(6.4) / 27.0
    if mels.ndim:
        log_t = mels >= min_log_mel
        freqs[log_t] = min_log_hz * np.exp(logstep * (mels[log_t] - min_log_mel))
    elif mels >= min_log_mel:
        freqs = min_log_hz * np.exp(logstep * (mels - min_log_mel))
    return freqs


def _mel_frequencies(n_mels=128, *, fmin=0.0, fmax=11025.0, htk=False):
    min_mel = _hz_to_mel(fmin, htk=htk)
    max_mel = _hz_to_mel(fmax, htk=htk)
    mels = np.linspace(min_mel, max_mel, n_mels)
    return _mel_to_hz(mels, htk=htk)


def _librosa_mel(*, sr, n_fft, n_mels=128, fmin=0.0, fmax=None, htk=False, norm="slaney", dtype=np.float32):
    if fmax is None:
        fmax = float(sr) / 2
    if norm != "slaney" or htk:
        raise NotImplementedError("the stand-in restates norm='slaney', htk=False only")
    n_mels = int(n_mels)
    weights = np.zeros((n_mels, int(1 + n_fft // 2)), dtype=dtype)
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_frequencies(n_mels + 2, fmin=fmin, fmax=fmax, htk=htk)
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights


def install_librosa_standin():
    lib = types.ModuleType("librosa")
    lib.__spec__ = importlib.machinery.ModuleSpec("librosa", None)
    lib.__version__ = LIBROSA_VERSION
    filt = types.ModuleType("librosa.filters")
    filt.__spec__ = importlib.machinery.ModuleSpec("librosa.filters", None)
    filt.mel = _librosa_mel
    lib.filters = filt
    sys.modules["librosa"] = lib
    sys.modules["librosa.filters"] = filt
    # transformers.audio_utils imports soxr whenever librosa is present (used only by load_audio's resampling)
    soxr = types.ModuleType("soxr")
    soxr.__spec__ = importlib.machinery.ModuleSpec("soxr", None)

    def _no_resample(*a, **k):
        raise RuntimeError("soxr stand-in: resampling is not part of these fixtures")
    soxr.resample = _no_resample
    sys.modules["soxr"] = soxr


install_librosa_standin()
sys.path.insert(0, os.path.abspath(ARGS.hf_ref))
import hfenv  # noqa: E402

hfenv.setup("5.2.0")
import vl_compat  # noqa: E402,F401  (transformers' image_utils imports torchvision's NEAREST_EXACT)
import torch  # noqa: E402
import transformers  # noqa: E402
import transformers.models as _tm  # noqa: E402

torch.set_num_threads(1)
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

# ------------------------------------------------------------------------------------------------------------------
# The lfm2_audio folder (newer than v5.2.0) laid over the v5.2.0 tree
TF_COMMIT = "7d9754a05193eb79b1d86aa744b622b8068008cd"  # v5.2.0
OVERLAY_FILES = {  # upstream huggingface/transformers files, used unmodified (path, commit, sha256 of the bytes)
    "feature_extraction_lfm2_audio.py": ("src/transformers/models/lfm2_audio/feature_extraction_lfm2_audio.py",
                                         "5074fc3be2b966facd94d10259fde1c66612d1a5",
                                         "01acc27af39ca77fc56d9d649276b5d544e0ca00cb723fe661ab5833a0c42b56"),
    "modeling_lfm2_audio.py": ("src/transformers/models/lfm2_audio/modeling_lfm2_audio.py",
                               "0945703d90e43063d0522af9af2a2d408b998adc",
                               "1d399b775b4f83ea6e0fae3bfaa6f4ced5df93aa5b94fb2bfed09d9bbcd47ff4"),
}
CONFIG_PORT = ("src/transformers/models/lfm2_audio/configuration_lfm2_audio.py",
               "commit not reported by the search tool (find_string id 59875036439, 16 698 chars; the version with "
               "tie_audio_embeddings, Lfm2AudioPreprocessorConfig and Lfm2AudioEncoderConfig)")


def sha256_file(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def lay_over_lfm2_audio():
    src = ARGS.overlay or os.path.join(hfenv.HF_ROOT, "overlay", "lfm2_audio")
    tmp = tempfile.mkdtemp(prefix="lfm2audio_")
    pkg = os.path.join(tmp, "lfm2_audio")
    os.makedirs(pkg)
    for name, (_, commit, digest) in OVERLAY_FILES.items():
        p = os.path.join(src, name)
        if not os.path.isfile(p) or sha256_file(p) != digest:
            sys.exit(f"{p}: missing or not the upstream file ({commit}); see tools/audio_reference/README.md")
        shutil.copy(p, pkg)
    shutil.copy(os.path.join(HERE, "configuration_lfm2_audio.py"), pkg)
    with open(os.path.join(pkg, "__init__.py"), "w") as f:  # shim: an empty package file (no lazy-module table)
        f.write("")
    _tm.__path__.append(tmp)  # -> transformers.models.lfm2_audio
    return tmp


_OVERLAY_TMP = lay_over_lfm2_audio()
from transformers.models.lfm2_audio.feature_extraction_lfm2_audio import Lfm2AudioFeatureExtractor  # noqa: E402
from transformers.models.lfm2_audio.configuration_lfm2_audio import Lfm2AudioConfig  # noqa: E402
from transformers.models.lfm2_audio.modeling_lfm2_audio import Lfm2AudioForConditionalGeneration  # noqa: E402

SHIMS = list(hfenv.COMPAT_SHIMS) + [
    "models/lfm2_audio laid over the v5.2.0 tree: a temporary package folder appended to transformers.models.__path__ "
    "(upstream feature_extraction_lfm2_audio.py and modeling_lfm2_audio.py byte for byte) with an EMPTY __init__.py (the upstream lazy-module "
    "__init__ is not used; the extractor module is imported directly)",
    "librosa (not installed): a stand-in module whose filters.mel restates librosa 0.11 filters.mel for "
    "htk=False, norm='slaney' (float64 ramps, float32 weights array, in-place float64 enorm multiply), in "
    "tools/audio_reference/make_audio_fixtures.py; sources " + ", ".join(f"librosa/librosa {p}@{c[:8]}"
                                                                         for p, c in LIBROSA_SOURCES.items()),
    "Lfm2AudioConfig / Lfm2AudioDepthConfig / Lfm2AudioEncoderConfig / Lfm2AudioPreprocessorConfig: the upstream "
    "@strict dataclasses restated in v5.2.0 keyword style (tools/audio_reference/configuration_lfm2_audio.py; same "
    "fields, defaults, checks and derived values)",
    "attn_implementation='eager' forced on the whole model (set_attn_implementation after construction, "
    "attn_implementation='eager' on reload): torch 1.13 has no F.scaled_dot_product_attention; the encoder is eager "
    "by the modeling code itself; the depthformer's direct F.scaled_dot_product_attention is never reached",
    "input_features_attention_mask always passed (the extractor's, all ones for one clip): v5.2.0's ParakeetEncoder."
    "forward with attention_mask=None and output_attention_mask=True raises UnboundLocalError (output_mask)",
    "soxr (not installed; transformers.audio_utils imports it whenever librosa is importable): a placeholder module "
    "whose resample raises (never called: no resampling happens in these fixtures)",
]
PROVENANCE = {
    "transformers": transformers.__version__,
    "transformers_commit": TF_COMMIT,
    "laid_over": [{"file": v[0], "commit": v[1], "sha256": v[2], "use": "unmodified"} for v in OVERLAY_FILES.values()]
    + [{"file": CONFIG_PORT[0], "commit": CONFIG_PORT[1], "use": "ported to v5.2.0 keyword style: "
        "tools/audio_reference/configuration_lfm2_audio.py"}],
    "librosa": LIBROSA_VERSION,
    "torch": torch.__version__,
    "numpy": np.__version__,
    "python": sys.version.split()[0],
    "dtype": "float32",
    "threads": 1,
    "compat_shims": SHIMS,
    "generator": "tools/audio_reference/make_audio_fixtures.py",
}

SR = 16000
HOP = 160


# ------------------------------------------------------------------------------------------------------------------
# Synthetic clips: 16 kHz mono float32, exactly what the feature extractor receives.
def make_clips():
    g = np.random.default_rng(20261206)

    def t(n):
        return np.arange(n, dtype=np.float64) / SR

    def f32(x):
        return np.asarray(x, dtype=np.float32)

    def sweep(n, f0, f1, amp):
        tt = t(n)
        dur = n / SR
        return f32(amp * np.sin(2 * np.pi * (f0 * tt + 0.5 * (f1 - f0) / dur * tt ** 2)))

    clips = []
    clips.append(("silence_0p5s", f32(np.zeros(8000)), "8000 zeros (0.5 s): every mel bin is log(2^-24), variance 0"))
    clips.append(("sweep_1p0s", sweep(16000, 100.0, 7000.0, 0.5),
                  "linear chirp 100 Hz -> 7 kHz, amplitude 0.5, 1.0 s"))
    clips.append(("noise_3p3s", f32(g.normal(0.0, 0.1, 52800)), "white Gaussian noise, sigma 0.1, 3.3 s, numpy "
                  "default_rng(20261206) first draw"))
    clips.append(("min_320", f32(0.3 * np.sin(2 * np.pi * 440.0 * t(320))),
                  "shortest clip HF accepts (2 hops): 440 Hz tone, 320 samples, T=3, N=1"))
    clips.append(("tone_1280", f32(0.25 * np.sin(2 * np.pi * 1000.0 * t(1280)) + 0.05 * g.normal(0.0, 1.0, 1280)),
                  "1 kHz tone + noise, 1280 samples (T=9, 1 mod 8: N=2)"))
    clips.append(("hops_5280", sweep(5280, 3000.0, 200.0, 0.8),
                  "falling chirp 3 kHz -> 200 Hz, 5280 samples (a multiple of the hop: T=34, N=5)"))
    clips.append(("chirp_up_5280", sweep(5280, 200.0, 3000.0, 0.6),
                  "rising chirp 200 Hz -> 3 kHz, 5280 samples (same length as hops_5280: the two-clip prompt)"))
    clips.append(("odd_16073", f32(0.2 * np.sin(2 * np.pi * 220.0 * t(16073)) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t(16073)))
                                   + 0.02 * g.normal(0.0, 1.0, 16073)),
                  "amplitude-modulated 220 Hz tone + noise, 16073 samples (T=101, N=13)"))
    # Content that a resampler would hand over from other sources.  The resampling itself is NOT part of the
    # reference: these are synthesised directly at 16 kHz.
    n8 = 12000
    clips.append(("from_8k_0p75s", f32(0.4 * np.sin(2 * np.pi * 700.0 * t(n8)) + 0.3 * np.sin(2 * np.pi * 2900.0 * t(n8))),
                  "stands for an 8 kHz source after resampling to 16 kHz: 700 Hz + 2.9 kHz tones (all energy below "
                  "the 4 kHz Nyquist of the source), 0.75 s, synthesised directly at 16 kHz"))
    n44 = 21920
    left = 0.5 * np.sin(2 * np.pi * 330.0 * t(n44))
    right = 0.5 * np.sin(2 * np.pi * 5200.0 * t(n44)) + 0.05 * g.normal(0.0, 1.0, n44)
    clips.append(("from_44k_stereo_1p37s", f32(0.5 * (left + right)),
                  "stands for a 44.1 kHz stereo source after downmix (mean of L and R) and resampling to 16 kHz: "
                  "L = 330 Hz tone, R = 5.2 kHz tone + noise; 21920 samples (1.37 s), synthesised directly at 16 kHz"))
    # appended last, with its own generator, so that every clip above keeps its bytes
    clips.append(("speechlike_12s", speechlike(192000, 5812),
                  "synthetic voiced speech, 12.0 s (192000 samples, T=1201, N=151): harmonics of a pitch contour "
                  "100-220 Hz under three vowel-like formant resonances, syllables of 120-320 ms with raised-cosine "
                  "envelopes and pauses of 60-450 ms, breath noise sigma 0.002; numpy default_rng(5812)"))
    return clips


# Vowel-like formant targets (F1, F2, F3 in Hz; textbook adult-male averages): each syllable picks one.
VOWELS = [(730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480), (570, 840, 2410)]
FORMANT_BW = (90.0, 110.0, 170.0)  # resonance half-widths (Hz)
FORMANT_GAIN = (1.0, 0.6, 0.3)


def speechlike(n, seed):
    """A deterministic voiced signal with speech's coarse structure (a long clip for the encoder, not speech):
    syllables (120-320 ms) with pauses (60-450 ms, longer after every 3-6 syllables); within a syllable the sum of
    the harmonics k*f0 < 5 kHz of a slowly moving pitch f0(t) in [100, 220] Hz, harmonic k weighted by 1/k times
    three Lorentzian formant resonances that glide between the syllables' vowel targets; plus breath noise."""
    g = np.random.default_rng(seed)
    tt = np.arange(n, dtype=np.float64) / SR
    # syllable layout: (start, length) in samples, pauses between them
    env = np.zeros(n)
    centres, vowels = [], []
    pos, count = int(0.15 * SR), 0
    while True:
        length = int(g.uniform(0.12, 0.32) * SR)
        if pos + length > n - int(0.1 * SR):
            break
        ramp = min(length // 3, int(0.04 * SR))
        e = np.ones(length)
        e[:ramp] = 0.5 - 0.5 * np.cos(np.pi * np.arange(ramp) / ramp)
        e[length - ramp:] = e[:ramp][::-1]
        env[pos:pos + length] = e * g.uniform(0.6, 1.0)
        centres.append(pos + length / 2)
        vowels.append(VOWELS[int(g.integers(len(VOWELS)))])
        count += 1
        long_pause = count % int(g.integers(3, 7)) == 0
        pos += length + int((g.uniform(0.25, 0.45) if long_pause else g.uniform(0.06, 0.12)) * SR)
    # pitch: two slow sinusoids, 160 +- 60 Hz at most, inside [100, 220]
    ph = g.uniform(0.0, 2 * np.pi, 2)
    f0 = 160.0 + 42.0 * np.sin(2 * np.pi * 0.23 * tt + ph[0]) + 16.0 * np.sin(2 * np.pi * 1.7 * tt + ph[1])
    phase = 2 * np.pi * np.cumsum(f0) / SR
    # formant tracks: each formant glides linearly between successive syllable centres
    centres = np.asarray(centres)
    formants = [np.interp(np.arange(n), centres, [v[j] for v in vowels]) for j in range(3)]
    x = np.zeros(n)
    for k in range(1, int(5000 // 100) + 1):
        fk = k * f0
        gain = sum(a / (1.0 + ((fk - F) / bw) ** 2) for a, F, bw in zip(FORMANT_GAIN, formants, FORMANT_BW))
        x += np.where(fk < 5000.0, gain / k, 0.0) * np.sin(k * phase)
    x *= env
    x *= 0.5 / np.abs(x).max()
    return np.asarray(x + 0.002 * g.normal(0.0, 1.0, n), dtype=np.float32)


def n_tokens(L):
    T = L // HOP + 1
    return T, (T + 7) // 8


# ------------------------------------------------------------------------------------------------------------------
def f32json(x):
    a = np.asarray(x, dtype=np.float32)
    if a.ndim == 0:
        return float(f"{float(a):.9g}")
    return [f32json(v) for v in a]


def _dumps(o, ind=0):
    """dicts one key per line; lists of scalars on one line; a list of lists one row per line."""
    def scalar(x):
        return not isinstance(x, (dict, list))
    if isinstance(o, dict):
        if not o:
            return "{}"
        pad = " " * (ind + 1)
        return "{\n" + ",\n".join(pad + json.dumps(k) + ": " + _dumps(v, ind + 1) for k, v in o.items()) + "\n" + " " * ind + "}"
    if isinstance(o, list) and o and not all(scalar(x) for x in o):
        pad = " " * (ind + 1)
        return "[\n" + ",\n".join(pad + _dumps(v, ind + 1) for v in o) + "\n" + " " * ind + "]"
    if isinstance(o, list):
        return "[" + ",".join(json.dumps(x, ensure_ascii=False) for x in o) + "]"
    return json.dumps(o, ensure_ascii=False)


def write_json(path, obj):
    s = _dumps(obj)
    json.loads(s)
    with open(path, "w", encoding="utf-8") as f:
        f.write(s)
        f.write("\n")


def write_f32(folder, rel, arr):
    a = np.ascontiguousarray(np.asarray(arr, dtype="<f4"))
    p = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    b = a.tobytes()
    with open(p, "wb") as f:
        f.write(b)
    back = np.fromfile(p, dtype="<f4").reshape(a.shape)
    assert np.array_equal(back, a, equal_nan=True)
    return {"file": rel, "dtype": "float32", "byte_order": "little", "shape": list(a.shape),
            "sha256": hashlib.sha256(b).hexdigest()}


# ------------------------------------------------------------------------------------------------------------------
def numpy_f64_frontend(x, mel):
    """An independent float64 NumPy restatement of the front end (research notes §2), used only to measure how far a
    re-implementation lands from transformers' float32 values: pre-emphasis, centred zero-padded frames, symmetric
    Hann(400) zero-padded to 512, |rfft|^2, float32 mel matrix (as float64), ln(. + 2^-24), per-bin mean / unbiased
    std over the first floor(L/160) frames, (x - mean) / (std + 1e-5), trailing frames 0."""
    x = x.astype(np.float64)
    L = len(x)
    y = np.concatenate([x[:1], x[1:] - 0.97 * x[:-1]])
    yp = np.pad(y, 256)
    T = L // HOP + 1
    n = np.arange(400)
    w = np.zeros(512)
    w[56:456] = 0.5 - 0.5 * np.cos(2 * np.pi * n / 399)
    fr = np.stack([yp[HOP * t: HOP * t + 512] * w for t in range(T)])
    lm = np.log((np.abs(np.fft.rfft(fr, axis=1)) ** 2) @ mel.astype(np.float64).T + 2.0 ** -24)
    k = L // HOP
    m = lm[:k].mean(0)
    sd = np.sqrt(((lm[:k] - m) ** 2).sum(0) / (k - 1))
    f = (lm - m) / (sd + 1e-5)
    f[k:] = 0
    return lm, f


def make_frontend(out):
    d = os.path.join(out, "frontend")
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    fe = Lfm2AudioFeatureExtractor()  # the defaults = the LFM2(.5)-Audio front end (research notes §1.4)
    fe_cfg = json.loads(fe.to_json_string())
    clips = make_clips()
    mel = fe.mel_filters.numpy()
    window = fe.window.numpy()
    rec = []
    singles = {}
    for name, x, what in clips:
        L = int(x.shape[0])
        T, N = n_tokens(L)
        bf = fe(x, sampling_rate=SR, return_tensors="pt")
        feats = bf["input_features"][0]
        mask = bf["attention_mask"][0]
        assert feats.shape == (T, 128) and int(mask.sum()) == T == mask.numel(), (name, feats.shape, mask)
        # the un-normalised log-mel, from the same extractor method on the pre-emphasised samples
        xt = torch.from_numpy(x)[None]
        pre = torch.cat([xt[:, :1], xt[:, 1:] - fe.preemphasis * xt[:, :-1]], dim=1)
        logmel = fe._torch_extract_fbank_features(pre)[0]
        n = L // HOP
        assert torch.all(feats[n:] == 0)
        singles[name] = feats
        lm64, f64 = numpy_f64_frontend(x, mel)
        e = {"name": name, "what": what, "samples": write_f32(d, f"clips/{name}.f32", x),
             "num_samples": L, "duration_s": L / SR,
             "num_frames_T": T, "normalised_frames_n": n, "audio_tokens_N": N,
             "attention_mask_sum": int(mask.sum()),
             "input_features": write_f32(d, f"features/{name}.f32", feats.numpy()),
             "log_mel_unnormalised": write_f32(d, f"log_mel/{name}.f32", logmel.numpy()),
             "input_features_stats": {"min": f32json(feats.min()), "max": f32json(feats.max()),
                                      "mean": f32json(feats.mean()), "abs_sum": f32json(feats.abs().sum())},
             "float64_numpy_maxdiff": {"log_mel_unnormalised": f32json(np.abs(lm64 - logmel.numpy()).max()),
                                       "input_features": f32json(np.abs(f64 - feats.numpy()).max())}}
        if L <= 1280:
            e["input_features_values"] = f32json(feats.numpy())
        rec.append(e)
    # a right-padded batch, as the extractor pads it: every clip's real frames must equal its run-alone frames
    names = [c[0] for c in clips]
    bf = fe([c[1] for c in clips], sampling_rate=SR, return_tensors="pt")
    batch = {"what": "all clips in one call (right-padded with 0.0 to the longest); per clip the max abs difference "
                     "of its first T frames from the run-alone features, and its attention-mask sum",
             "batch_frames": int(bf["input_features"].shape[1]), "clips": []}
    for i, name in enumerate(names):
        T = singles[name].shape[0]
        diff = float((bf["input_features"][i, :T] - singles[name]).abs().max())
        batch["clips"].append({"name": name, "maxdiff": diff, "attention_mask_sum": int(bf["attention_mask"][i].sum()),
                               "padded_frames_all_zero": bool(torch.all(bf["input_features"][i, T:] == 0))})
    ref = {
        "fixture": "frontend",
        "provenance": PROVENANCE,
        "feature_extractor": {"class": "Lfm2AudioFeatureExtractor", "config": fe_cfg},
        "constants": {"sampling_rate": SR, "n_fft": fe.n_fft, "hop_length": fe.hop_length, "win_length": fe.win_length,
                      "preemphasis": fe.preemphasis, "num_mel_bins": fe.feature_size,
                      "log_zero_guard": 2 ** -24, "normalisation_eps_added_to_std": 1e-5,
                      "window": "torch.hann_window(400, periodic=False) (symmetric), zero-padded to 512 centred; "
                                "torch.stft center=True, pad_mode='constant' (256 zeros each side)"},
        "window": write_f32(d, "window_hann400_symmetric.f32", window),
        "mel_filters": write_f32(d, "mel_filters_128x257.f32", mel),
        "token_count": "T = floor(L/160) + 1 (frames, incl. the terminal centred frame the encoder also gets); "
                       "n = floor(L/160) frames enter the normalisation; N = (T + 7) // 8 audio tokens",
        "clips": rec,
        "padded_batch": batch,
        "tolerances": {"input_features": 1e-6, "log_mel_unnormalised": 1e-5, "mel_filters": 1e-7},
    }
    # the exact (float64) features of the same clips: frontend/features_f64, ref["features_f64"] (numpy only)
    sys.path.insert(0, HERE)
    from exact_frontend_f64 import add_exact_features
    add_exact_features(d, ref)
    write_json(os.path.join(d, "reference.json"), ref)
    return ref

# ------------------------------------------------------------------------------------------------------------------
# Tiny random Lfm2Audio checkpoints (research notes §6): the real front end (128 mels), small encoder / backbone.
BOS, IM_START, IM_END, NL = 1, 6, 7, 10  # <|startoftext|>, <|im_start|>, <|im_end|> as in LFM2; "\n" notional
AUDIO_ID = 133                           # <|reserved_123|>, the audio-input placeholder
ROLE = {"system": [200, 201], "user": [202], "assistant": [203]}  # notional role-name ids (+ NL)
ASR_TEXT = [210, 211, 212, 213]          # notional ids of "Perform ASR."
VOCAB = 256

MODELS = [
    {"name": "lfm2audio_tiny_a", "seed": 5801,
     "what": "2 encoder layers (d 32, 4 heads, ff 64, 4 subsampling channels); backbone [conv, attn, conv, attn]; "
             "tie_audio_embeddings false, depthformer tie true",
     "encoder": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
                 "subsampling_conv_channels": 4},
     "lfm": {"layer_types": ["conv", "full_attention", "conv", "full_attention"], "intermediate_size": 128},
     "tie_audio_embeddings": False, "depth_tie": True},
    {"name": "lfm2audio_tiny_b", "seed": 5802,
     "what": "3 encoder layers (d 48, 6 heads, ff 96, 8 subsampling channels); backbone [attn, conv, conv, attn, conv]; "
             "tie_audio_embeddings true, depthformer tie false",
     "encoder": {"hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 6, "intermediate_size": 96,
                 "subsampling_conv_channels": 8},
     "lfm": {"layer_types": ["full_attention", "conv", "conv", "full_attention", "conv"], "intermediate_size": 160},
     "tie_audio_embeddings": True, "depth_tie": False},
]
MODEL_CLIPS = ["min_320", "tone_1280", "hops_5280", "chirp_up_5280", "sweep_1p0s", "from_8k_0p75s", "from_44k_stereo_1p37s",
               "noise_3p3s", "speechlike_12s"]
PROMPT_CLIP = "sweep_1p0s"
PAIR_CLIPS = ("hops_5280", "chirp_up_5280")      # equal lengths: one extractor call, no padding
PADDED_PAIR_CLIPS = ("tone_1280", "hops_5280")   # unequal lengths: padded batch (HF v5.2.0 gives NaN, recorded)


def build_model_config(mx):
    enc = dict(model_type="parakeet_encoder", num_mel_bins=128, conv_kernel_size=9, subsampling_factor=8,
               subsampling_conv_kernel_size=3, subsampling_conv_stride=2, hidden_act="silu", attention_bias=True,
               convolution_bias=True, dropout=0.0, dropout_positions=0.0, layerdrop=0.0, activation_dropout=0.0,
               attention_dropout=0.0, max_position_embeddings=5000, scale_input=False, **mx["encoder"])
    lfm = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=len(mx["lfm"]["layer_types"]),
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128000, norm_eps=1e-5,
               conv_L_cache=3, pad_token_id=0, bos_token_id=BOS, eos_token_id=IM_END, tie_word_embeddings=True,
               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, block_multiple_of=32, **mx["lfm"])
    depth = dict(layers=1, dim=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                 tie=mx["depth_tie"])
    return Lfm2AudioConfig(encoder=enc, lfm=lfm, depthformer=depth, codebooks=2, audio_vocab_size=16,
                           audio_eos_token_id=15, tie_audio_embeddings=mx["tie_audio_embeddings"])


def randomize_model(model, seed):
    """Every parameter and BatchNorm statistic drawn from a seeded generator so that no operator is an identity:
    weights N(0, 1/fan_in), biases N(0, 0.1^2), norm gains (LayerNorm, RMSNorm, BatchNorm) U(0.5, 1.5),
    rel-pos biases bias_u / bias_v N(0, 0.2^2), token embeddings N(0, 1) (row 0 = <|pad|> zero),
    BatchNorm running_mean N(0, 0.5^2), running_var U(0.5, 2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias_u") or name.endswith("bias_v"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            elif p.dim() == 1 and "norm" in name and name.endswith(".weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
                p[0].zero_()
            elif name.endswith("embedding.weight") or name.endswith("emb.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.dim() >= 2:
                fan_in = int(np.prod(p.shape[1:]))
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            else:
                raise RuntimeError(f"randomize_model: no rule for {name} {tuple(p.shape)}")
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.5)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) * 1.5 + 0.5)


def asr_prompt(n_list, between=(220,)):
    """The ASR chat prompt of research notes §1.5 with every audio placeholder expanded to N copies of id 133:
    <|startoftext|><|im_start|>system\\nPerform ASR.<|im_end|>\\n<|im_start|>user\\n[audio]<|im_end|>\\n
    <|im_start|>assistant\\n  (role words / text as notional ids; several clips are separated by `between`)."""
    ids = [BOS, IM_START] + ROLE["system"] + [NL] + ASR_TEXT + [IM_END, NL, IM_START] + ROLE["user"] + [NL]
    for i, n in enumerate(n_list):
        if i:
            ids += list(between)
        ids += [AUDIO_ID] * n
    return ids + [IM_END, NL, IM_START] + ROLE["assistant"] + [NL]


class EncoderCapture:
    def __init__(self, model):
        self.out = None
        model.model.conformer.register_forward_hook(self.hook)

    def hook(self, mod, inp, out):
        self.out = out.last_hidden_state.detach().clone()


@torch.no_grad()
def run_prompt(model, ids, feats, fmask):
    o = model(input_ids=torch.tensor([ids]), input_features=feats, input_features_attention_mask=fmask)
    return o.logits[0], o.audio_hidden_states


def margin(row):
    top = torch.topk(row, 2).values
    return float(top[0] - top[1])


@torch.no_grad()
def greedy(model, ids, feats, fmask, steps=4, min_margin=5e-3):
    """Greedy continuation by full recomputation (the placeholders stay in the prompt); stops before the first step
    whose argmax does not win by min_margin."""
    out, seq = [], list(ids)
    for _ in range(steps):
        logits, _ = run_prompt(model, seq, feats, fmask)
        row = logits[-1]
        m = margin(row)
        if m < min_margin:
            break
        t = int(row.argmax())
        out.append({"token": t, "margin": f32json(m)})
        seq.append(t)
    return out


def effective_model(model):
    enc = model.model.conformer
    c = model.config
    return {"architecture": type(model).__name__, "encoder_class": type(enc).__name__,
            "encoder_attn_implementation": enc.config._attn_implementation,
            "backbone_attn_implementation": model.model.lfm.config._attn_implementation,
            "encoder_hidden_size": c.encoder.hidden_size, "encoder_layers": c.encoder.num_hidden_layers,
            "encoder_heads": c.encoder.num_attention_heads, "encoder_intermediate_size": c.encoder.intermediate_size,
            "subsampling_conv_channels": c.encoder.subsampling_conv_channels,
            "subsampling_linear_in": enc.subsampling.linear.in_features,
            "encoder_inv_freq_used": "exp(-ln(10000) * 2i / d) (get_audio_features overwrites the buffer)",
            "backbone_hidden_size": c.lfm.hidden_size, "backbone_layer_types": c.lfm.layer_types,
            "backbone_ff": [L.feed_forward.w1.out_features for L in model.model.lfm.layers],
            "adapter": "LayerNorm(d, eps 1e-5) -> Linear(d, D) -> GELU(erf) -> Linear(D, D)",
            "tie_audio_embeddings": c.tie_audio_embeddings, "depthformer_tie": c.depthformer.tie,
            "text_logits": "F.linear(last_hidden_state, embed_tokens.weight) (tied; the LFM2 final norm is inside lfm)"}


def make_model_fixture(out, mx, fe, clips):
    d = os.path.join(out, mx["name"])
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    torch.manual_seed(mx["seed"])
    mem = Lfm2AudioForConditionalGeneration(build_model_config(mx)).eval()
    randomize_model(mem, mx["seed"])
    mem.set_attn_implementation("eager")  # torch 1.13 has no F.scaled_dot_product_attention
    feats = {}
    for name in MODEL_CLIPS:
        bf = fe(clips[name], sampling_rate=SR, return_tensors="pt")
        feats[name] = (bf["input_features"], bf["attention_mask"].long())
    ids = asr_prompt([n_tokens(len(clips[PROMPT_CLIP]))[1]])
    before = run_prompt(mem, ids, *feats[PROMPT_CLIP])[0]
    mem.save_pretrained(d)
    model = Lfm2AudioForConditionalGeneration.from_pretrained(d, attn_implementation="eager").eval()
    assert model.model.lfm.config._attn_implementation == "eager"
    assert model.model.conformer.config._attn_implementation == "eager"
    logits, _ = run_prompt(model, ids, *feats[PROMPT_CLIP])
    assert torch.equal(logits, before), f"{mx['name']}: reloaded model differs from the in-memory one"
    cap = EncoderCapture(model)

    rows = []
    for name in MODEL_CLIPS:
        x = clips[name]
        T, N = n_tokens(len(x))
        with torch.no_grad():
            adapter, amask = model.model.get_audio_features(feats[name][0], feats[name][1])
        enc = cap.out[0]
        assert enc.shape[0] == N and adapter.shape[1] == N and bool(amask.all()), (name, enc.shape, adapter.shape)
        rows.append({"name": name, "num_samples": len(x), "num_frames_T": T, "audio_tokens_N": N,
                     "input_features": f"../frontend/features/{name}.f32",
                     "encoder_output": write_f32(d, f"outputs/encoder_{name}.f32", enc.numpy()),
                     "adapter_output": write_f32(d, f"outputs/adapter_{name}.f32", adapter[0].numpy())})

    # one ASR prompt with one clip
    logits, audio_rows = run_prompt(model, ids, *feats[PROMPT_CLIP])
    adapter_alone = torch.from_numpy(np.fromfile(os.path.join(d, f"outputs/adapter_{PROMPT_CLIP}.f32"), "<f4")
                                     ).reshape(audio_rows.shape)
    prompt = {"clip": PROMPT_CLIP, "input_ids": ids, "num_positions": len(ids),
              "audio_positions": [i for i, t in enumerate(ids) if t == AUDIO_ID],
              "logits": write_f32(d, "outputs/prompt_logits.f32", logits.numpy()),
              "argmax": [int(v) for v in logits.argmax(-1)],
              "argmax_margin_ok": [margin(r) >= 5e-3 for r in logits],
              "audio_rows_vs_adapter_output_maxdiff": f32json((audio_rows - adapter_alone).abs().max()),
              "greedy": greedy(model, ids, *feats[PROMPT_CLIP])}

    # one prompt with two clips: the feature extractor pads them into one batch, the encoder runs masked
    xa, xb = (clips[n] for n in PAIR_CLIPS)
    bf = fe([xa, xb], sampling_rate=SR, return_tensors="pt")
    na, nb = (n_tokens(len(x))[1] for x in (xa, xb))
    ids2 = asr_prompt([na, nb])
    logits2, audio_rows2 = run_prompt(model, ids2, bf["input_features"], bf["attention_mask"].long())
    assert int(bf["attention_mask"].sum()) == bf["attention_mask"].numel()  # equal lengths: no padding
    alone = torch.cat([torch.from_numpy(np.fromfile(os.path.join(d, f"outputs/adapter_{n}.f32"), "<f4")
                                        ).reshape(-1, audio_rows2.shape[1]) for n in PAIR_CLIPS])
    pair = {"clips": list(PAIR_CLIPS), "input_ids": ids2, "num_positions": len(ids2),
            "audio_positions": [i for i, t in enumerate(ids2) if t == AUDIO_ID],
            "what": "both clips given to the feature extractor in one call (right-padded batch + attention_mask), "
                    "the encoder run on the padded batch with its masks, rows scattered in clip order",
            "logits": write_f32(d, "outputs/pair_logits.f32", logits2.numpy()),
            "argmax": [int(v) for v in logits2.argmax(-1)],
            "argmax_margin_ok": [margin(r) >= 5e-3 for r in logits2],
            "audio_rows_finite": bool(torch.isfinite(audio_rows2).all()),
            "audio_rows_vs_run_alone_adapter_maxdiff": f32json((audio_rows2 - alone).abs().max()),
            "greedy": greedy(model, ids2, bf["input_features"], bf["attention_mask"].long())}

    # the same with two clips of different lengths: HF pads them and runs the encoder with masks.  With v5.2.0's
    # parakeet (eager) the padded query rows of the shorter clip get softmax over all -inf = NaN, which reaches its
    # valid rows in the next layer (0 * NaN in probs @ V).  Recorded as a finding; no values stored.
    xa, xb = (clips[n] for n in PADDED_PAIR_CLIPS)
    bf = fe([xa, xb], sampling_rate=SR, return_tensors="pt")
    with torch.no_grad():
        a3, m3 = model.model.get_audio_features(bf["input_features"], bf["attention_mask"].long())
    padded_pair = {"clips": list(PADDED_PAIR_CLIPS),
                   "what": "two clips of different lengths in one extractor call (right-padded) and one encoder call "
                           "with masks, as the HF processor would batch them; NO reference values stored",
                   "valid_rows_per_clip": [int(v) for v in m3.sum(-1)],
                   "nan_valid_rows_per_clip": [[i for i in range(int(m3[b].sum())) if bool(torch.isnan(a3[b, i]).any())]
                                               for b in range(2)],
                   "finding": "transformers v5.2.0 models/parakeet (eager attention) on torch 1.13: fully masked padded "
                              "query rows give softmax(all -inf) = NaN; the next layer's probs @ V turns 0 * NaN into "
                              "NaN in the valid rows of the shorter clip. Run clips one at a time (the engine plan)."}

    ckpt, meta = read_safetensors_header(os.path.join(d, "model.safetensors"))
    ref = {"fixture": mx["name"], "what": mx["what"], "seed": mx["seed"], "provenance": PROVENANCE,
           "effective": effective_model(model),
           "config_dict": json.loads(open(os.path.join(d, "config.json")).read()),
           "checkpoint_tensors": {"metadata": meta, "tensors": ckpt},
           "tokens": {"bos": BOS, "im_start": IM_START, "im_end": IM_END, "newline": NL, "audio": AUDIO_ID,
                      "roles": ROLE, "asr_text": ASR_TEXT, "vocab_size": VOCAB,
                      "note": "No tokenizer: BOS/<|im_start|>/<|im_end|>/133 are the real LFM2 ids; the other ids "
                              "are notional stand-ins for the chat template's text (research notes §1.5)."},
           "clips": rows, "prompt": prompt, "pair_prompt": pair, "padded_pair": padded_pair,
           "tolerances": {"encoder_output": 1e-4, "adapter_output": 1e-4, "logits": 1e-4, "greedy_margin": 5e-3}}
    write_json(os.path.join(d, "reference.json"), ref)
    return ref


def read_safetensors_header(path):
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    meta = h.pop("__metadata__", None)
    return {k: {"dtype": v["dtype"], "shape": v["shape"]} for k, v in sorted(h.items())}, meta



def main():
    t0 = time.time()
    out = os.path.abspath(ARGS.out)
    os.makedirs(out, exist_ok=True)
    ref = make_frontend(out)
    print(f"frontend: {len(ref['clips'])} clips, padded-batch max diff "
          f"{max(c['maxdiff'] for c in ref['padded_batch']['clips']):.3g}  ({time.time() - t0:.1f}s)", flush=True)
    fe = Lfm2AudioFeatureExtractor()
    clips = {name: x for name, x, _ in make_clips()}
    for mx in MODELS:
        r = make_model_fixture(out, mx, fe, clips)
        print(f"{mx['name']}: prompt {r['prompt']['num_positions']} positions, greedy {len(r['prompt']['greedy'])} "
              f"steps; pair prompt audio rows vs alone {r['pair_prompt']['audio_rows_vs_run_alone_adapter_maxdiff']}"
              f" finite={r['pair_prompt']['audio_rows_finite']}; padded pair NaN rows "
              f"{r['padded_pair']['nan_valid_rows_per_clip']}  ({time.time() - t0:.1f}s)", flush=True)
    shutil.rmtree(_OVERLAY_TMP, ignore_errors=True)
    print(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
