#!/usr/bin/env python3
"""The exact (float64) front-end reference: tests/data/audio/frontend/features_f64/<name>.f64.

    /usr/bin/python3 tools/audio_reference/exact_frontend_f64.py [tests/data/audio/frontend]

transformers' float32 features (frontend/features/) carry the rounding of torch's float32 STFT and sums (~3.4e-4
on the fixtures), which no independent port can reproduce. This script restates Lfm2AudioFeatureExtractor
(docs/design/audio_input_research.md §2) in float64 NumPy — no torch, no transformers, no C++ — and writes its
features [T, 128] as raw little-endian float64 for every clip of frontend/reference.json, recording them there under
`features_f64` (file, shape, sha256, how made, and how far they are from transformers' float32 features).

What "exact" means here: every quantity derived from the float32 samples is computed in float64 from its defining
formula; nothing is rounded to float32 on the way:
  - pre-emphasis y[i] = x[i] - a*x[i-1] with a = float32(0.97) = 0.9700000286102295: the operand torch multiplies by
    (it casts the Python scalar to the tensor's dtype; checked: torch's result equals float32 arithmetic with 0.97f)
    and the value lfm's LogMelConfig holds;
  - the symmetric Hann window 0.5 - 0.5 cos(2 pi n / 399) in float64 (torch's float32 window differs from it by up
    to 1.9e-7 in 274 of 400 taps: float32 cos arithmetic that cannot be restated bit for bit);
  - the Slaney mel matrix (librosa.filters.mel's formula, htk=False, norm='slaney') in float64, NOT librosa's
    float32 storage of it (transformers' matrix, frontend/mel_filters_128x257.f32);
  - |rfft|^2 (numpy's pocketfft, float64), ln(mel + 2^-24), mean / unbiased std over the first floor(L/160)
    frames, (x - mean) / (std + 1e-5), frames >= floor(L/160) set to 0.
`sensitivity` in the record gives, per clip, how far the features move when one of those choices is swapped for
transformers' float32 constant (its window, its mel matrix) or a = 0.97 exactly: the size of what the choice decides.

Also called by make_audio_fixtures.py (add_exact_features) after it writes frontend/, so a full regeneration keeps
these files. Deterministic for a given numpy build.
"""
import hashlib
import json
import os
import sys

import numpy as np

SR, N_FFT, WIN, HOP, N_MELS = 16000, 512, 400, 160, 128
PREEMPHASIS = float(np.float32(0.97))
LOG_GUARD = 2.0 ** -24
STD_EPS = 1e-5
GENERATOR = "tools/audio_reference/exact_frontend_f64.py"


def slaney_mel_f64(sr=SR, n_fft=N_FFT, n_mels=N_MELS, fmin=0.0, fmax=SR / 2):
    """[n_mels, n_fft/2 + 1] float64: triangles on the Slaney mel scale (linear 200/3 Hz per mel below 1 kHz,
    log step ln(6.4)/27 above), edges = n_mels + 2 points evenly spaced in mel, weights scaled by 2 / (right - left)."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f):
        return f / f_sp if f < min_log_hz else min_log_mel + np.log(f / min_log_hz) / logstep

    def mel_to_hz(m):
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    freqs = np.arange(n_fft // 2 + 1) * (sr / n_fft)
    fb = np.zeros((n_mels, n_fft // 2 + 1))
    for m in range(n_mels):
        lo, c, hi = edges[m], edges[m + 1], edges[m + 2]
        fb[m] = np.maximum(0.0, np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c))) * (2.0 / (hi - lo))
    return fb


def hann_symmetric_f64(n=WIN):
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / (n - 1))


def features_f64(x, mel, window, a=PREEMPHASIS):
    """x: [L] float32 samples -> (log-mel [T, 128], features [T, 128]), float64."""
    x = np.asarray(x, dtype=np.float64)
    L = len(x)
    y = np.concatenate([x[:1], x[1:] - a * x[:-1]])
    yp = np.concatenate([np.zeros(N_FFT // 2), y, np.zeros(N_FFT // 2)])  # torch.stft center=True, constant pad
    w = np.zeros(N_FFT)
    w[(N_FFT - WIN) // 2:(N_FFT - WIN) // 2 + WIN] = window             # window centred in the n_fft frame
    T = L // HOP + 1
    frames = np.stack([yp[HOP * t:HOP * t + N_FFT] * w for t in range(T)])
    spec = np.fft.rfft(frames, axis=1)
    power = spec.real ** 2 + spec.imag ** 2
    lm = np.log(power @ mel.T + LOG_GUARD)
    n = L // HOP
    mean = lm[:n].mean(0)
    std = np.sqrt(((lm[:n] - mean) ** 2).sum(0) / (n - 1))
    f = (lm - mean) / (std + STD_EPS)
    f[n:] = 0.0
    return lm, f


def _read(folder, desc, dtype):
    p = os.path.join(folder, desc["file"])
    b = open(p, "rb").read()
    assert hashlib.sha256(b).hexdigest() == desc["sha256"], p
    return np.frombuffer(b, dtype=dtype).reshape(desc["shape"])


def _g(x):
    return float(f"{float(x):.3g}")


def add_exact_features(folder, ref):
    """Writes folder/features_f64/<name>.f64 for every clip in ref["clips"] (samples read from folder) and sets
    ref["features_f64"]."""
    mel = slaney_mel_f64()
    window = hann_symmetric_f64()
    mel_hf = _read(folder, ref["mel_filters"], "<f4").astype(np.float64)
    window_hf = _read(folder, ref["window"], "<f4").astype(np.float64)
    os.makedirs(os.path.join(folder, "features_f64"), exist_ok=True)
    clips = []
    for c in ref["clips"]:
        x = _read(folder, c["samples"], "<f4")
        _, f = features_f64(x, mel, window)
        rel = f"features_f64/{c['name']}.f64"
        b = np.ascontiguousarray(f, dtype="<f8").tobytes()
        with open(os.path.join(folder, rel), "wb") as fh:
            fh.write(b)
        hf = _read(folder, c["input_features"], "<f4").astype(np.float64)
        sens = {"window_torch_float32": _g(np.abs(features_f64(x, mel, window_hf)[1] - f).max()),
                "mel_matrix_float32": _g(np.abs(features_f64(x, mel_hf, window)[1] - f).max()),
                "preemphasis_0p97_exact": _g(np.abs(features_f64(x, mel, window, 0.97)[1] - f).max())}
        clips.append({"name": c["name"],
                      "features": {"file": rel, "dtype": "float64", "byte_order": "little", "shape": list(f.shape),
                                   "sha256": hashlib.sha256(b).hexdigest()},
                      "vs_transformers_float32_maxdiff": _g(np.abs(f - hf).max()),
                      "sensitivity": sens})
    fb32 = mel.astype(np.float32)
    ref["features_f64"] = {
        "what": "the exact (float64) features [T, 128] of every clip: transformers' Lfm2AudioFeatureExtractor "
                "restated in float64 NumPy (no torch, no transformers); lfm's C++ front end is tested against "
                "these at 1e-6 abs",
        "generator": GENERATOR,
        "numpy": np.__version__,
        "method": "x float32 -> float64; y[0]=x[0], y[i]=x[i]-a*x[i-1], a=float32(0.97)=0.9700000286102295 (torch's "
                  "operand); 256 zeros each side; frame t = y_padded[160t:160t+512] * (symmetric Hann 400, float64 "
                  "0.5-0.5cos(2 pi n/399), centred: 56 zeros each side); numpy.fft.rfft (float64); re^2+im^2; "
                  "Slaney mel matrix [128,257] in float64 (librosa's formula, not its float32 storage); "
                  "ln(mel + 2^-24); over the first n=floor(L/160) frames: (x-mean)/(unbiased std + 1e-5); frames "
                  ">= n set to 0",
        "mel_matrix_f64_vs_transformers_float32_maxdiff": float(f"{np.abs(mel - mel_hf).max():.3g}"),
        "mel_matrix_f64_rounded_to_float32_entries_differing": int((fb32 != mel_hf.astype(np.float32)).sum()),
        "sensitivity": "per clip: max |features - these| when one choice is swapped: torch's float32 window, "
                       "transformers' float32 mel matrix, or a = 0.97 exactly",
        "clips": clips,
    }


def _dumps(o, ind=0):
    """The layout make_audio_fixtures.py writes (dicts one key per line, scalar lists on one line)."""
    if isinstance(o, dict):
        if not o:
            return "{}"
        pad = " " * (ind + 1)
        return "{\n" + ",\n".join(pad + json.dumps(k) + ": " + _dumps(v, ind + 1) for k, v in o.items()) + "\n" + \
            " " * ind + "}"
    if isinstance(o, list) and o and not all(not isinstance(x, (dict, list)) for x in o):
        pad = " " * (ind + 1)
        return "[\n" + ",\n".join(pad + _dumps(v, ind + 1) for v in o) + "\n" + " " * ind + "]"
    if isinstance(o, list):
        return "[" + ",".join(json.dumps(x, ensure_ascii=False) for x in o) + "]"
    return json.dumps(o, ensure_ascii=False)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                                "tests", "data", "audio", "frontend")
    path = os.path.join(folder, "reference.json")
    with open(path, encoding="utf-8") as fh:
        ref = json.load(fh)
    add_exact_features(folder, ref)
    s = _dumps(ref)
    json.loads(s)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(s + "\n")
    for c in ref["features_f64"]["clips"]:
        print(f"{c['name']:24s} vs transformers {c['vs_transformers_float32_maxdiff']:.3g}  sensitivity {c['sensitivity']}")


if __name__ == "__main__":
    main()
