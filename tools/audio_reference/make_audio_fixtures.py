#!/usr/bin/env python3
"""Regenerates tests/data/audio: golden fixtures for the LFM2-Audio / LFM2.5-Audio speech-input path (issue 58),
made by the Hugging Face transformers code.

    /usr/bin/python3 tools/audio_reference/make_audio_fixtures.py [--out tests/data/audio]
        [--hf-ref ../shared/tools/hf_reference] [--overlay $HF_REF_ROOT/overlay/lfm2_audio]

Done so far: the FRONT END (tests/data/audio/frontend): transformers' `Lfm2AudioFeatureExtractor`
(models/lfm2_audio/feature_extraction_lfm2_audio.py, newer than v5.2.0, laid over the v5.2.0 tree unmodified and
checked by SHA-256) on synthetic 16 kHz mono float32 clips: normalised log-mel features, attention mask, the raw
(un-normalised) log-mel, the mel filter matrix, and the encoder-row / audio-token count N per clip.
Not done yet: the tiny random Lfm2Audio checkpoints (encoder, adapter, backbone logits); see the README.

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
}


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
    with open(os.path.join(pkg, "__init__.py"), "w") as f:  # shim: an empty package file (no lazy-module table)
        f.write("")
    _tm.__path__.append(tmp)  # -> transformers.models.lfm2_audio
    return tmp


_OVERLAY_TMP = lay_over_lfm2_audio()
from transformers.models.lfm2_audio.feature_extraction_lfm2_audio import Lfm2AudioFeatureExtractor  # noqa: E402

SHIMS = list(hfenv.COMPAT_SHIMS) + [
    "models/lfm2_audio laid over the v5.2.0 tree: a temporary package folder appended to transformers.models.__path__ "
    "(upstream feature_extraction_lfm2_audio.py byte for byte) with an EMPTY __init__.py (the upstream lazy-module "
    "__init__ is not used; the extractor module is imported directly)",
    "librosa (not installed): a stand-in module whose filters.mel restates librosa 0.11 filters.mel for "
    "htk=False, norm='slaney' (float64 ramps, float32 weights array, in-place float64 enorm multiply), in "
    "tools/audio_reference/make_audio_fixtures.py; sources " + ", ".join(f"librosa/librosa {p}@{c[:8]}"
                                                                         for p, c in LIBROSA_SOURCES.items()),
    "soxr (not installed; transformers.audio_utils imports it whenever librosa is importable): a placeholder module "
    "whose resample raises (never called: no resampling happens in these fixtures)",
]
PROVENANCE = {
    "transformers": transformers.__version__,
    "transformers_commit": TF_COMMIT,
    "laid_over": [{"file": v[0], "commit": v[1], "sha256": v[2], "use": "unmodified"} for v in OVERLAY_FILES.values()],
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
    return clips


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
    write_json(os.path.join(d, "reference.json"), ref)
    return ref


def main():
    t0 = time.time()
    out = os.path.abspath(ARGS.out)
    os.makedirs(out, exist_ok=True)
    ref = make_frontend(out)
    print(f"frontend: {len(ref['clips'])} clips, padded-batch max diff "
          f"{max(c['maxdiff'] for c in ref['padded_batch']['clips']):.3g}  ({time.time() - t0:.1f}s)", flush=True)
    shutil.rmtree(_OVERLAY_TMP, ignore_errors=True)
    print(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
