#!/usr/bin/env python3
"""Regenerates tests/data/audio/detokenizer_tiny: a golden fixture for LFM2.5-Audio's bundled detokenizer
(codes -> 24 kHz waveform, issue 59), made by transformers' own `Lfm2AudioDetokenizer`.

    /usr/bin/python3 tools/audio_reference/make_detokenizer_fixtures.py [--out tests/data/audio/detokenizer_tiny]
        [--hf-ref ../shared/tools/hf_reference] [--overlay $HF_REF_ROOT/overlay/lfm2_audio]

- The folder is laid out as an LFM2.5-Audio checkpoint's `audio_detokenizer/` subfolder: config.json (an Lfm2Config
  dict with `layer_types` holding "sliding_attention", `sliding_window`, `output_size` 1282) and model.safetensors with
  the module's own names (emb.emb.weight, lfm.*, lin.weight / lin.bias, istft.window): save_pretrained of a tiny,
  seeded random detokenizer, reloaded with from_pretrained and checked bit for bit.
- outputs/: for two code sequences (3 frames; 23 frames = 138 upsampled rows, past the window of 30) the upsampled
  embeddings (the LFM2 stack's input), its last_hidden_state (after the final norm), the `lin` output and the
  waveform.
- Same environment and pinning as make_audio_fixtures.py: transformers v5.2.0 from ../shared/tools/hf_reference
  (`hfenv.setup("5.2.0")` + vl_compat), the upstream lfm2_audio files laid over it unmodified (checked by SHA-256),
  the config classes from ./configuration_lfm2_audio.py, Debian's /usr/bin/python3 (torch 1.13.1), float32, CPU, one
  thread, eager attention. Deterministic: two runs give identical files. Nothing from transformers is stored here.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "audio", "detokenizer_tiny"))
ap.add_argument("--hf-ref", default=os.path.join(REPO, "..", "shared", "tools", "hf_reference"))
ap.add_argument("--overlay", default=None, help="folder with the upstream lfm2_audio files "
                "(default: $HF_REF_ROOT/overlay/lfm2_audio)")
ARGS = ap.parse_args()
if not os.path.isdir(ARGS.hf_ref) and os.path.isdir("/work/shared/tools/hf_reference"):  # a git worktree elsewhere
    ARGS.hf_ref = "/work/shared/tools/hf_reference"

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

TF_COMMIT = "7d9754a05193eb79b1d86aa744b622b8068008cd"  # v5.2.0
OVERLAY_FILES = {  # the same upstream files (and digests) as make_audio_fixtures.py
    "feature_extraction_lfm2_audio.py": ("src/transformers/models/lfm2_audio/feature_extraction_lfm2_audio.py",
                                         "5074fc3be2b966facd94d10259fde1c66612d1a5",
                                         "01acc27af39ca77fc56d9d649276b5d544e0ca00cb723fe661ab5833a0c42b56"),
    "modeling_lfm2_audio.py": ("src/transformers/models/lfm2_audio/modeling_lfm2_audio.py",
                               "0945703d90e43063d0522af9af2a2d408b998adc",
                               "1d399b775b4f83ea6e0fae3bfaa6f4ced5df93aa5b94fb2bfed09d9bbcd47ff4"),
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
    shutil.copy(os.path.join(HERE, "configuration_lfm2_audio.py"), pkg)
    with open(os.path.join(pkg, "__init__.py"), "w") as f:  # shim: an empty package file (no lazy-module table)
        f.write("")
    _tm.__path__.append(tmp)  # -> transformers.models.lfm2_audio
    return tmp


_OVERLAY_TMP = lay_over_lfm2_audio()
from transformers import Lfm2Config  # noqa: E402
import transformers.models.lfm2.modeling_lfm2 as modeling_lfm2  # noqa: E402
from transformers.models.lfm2_audio.modeling_lfm2_audio import Lfm2AudioDetokenizer  # noqa: E402

# The detokenizer hands the LFM2 stack a 4-D BOOLEAN mask (True: the key is visible), which
# create_causal_mask returns as-is. SDPA (transformers' default wherever torch has it) reads a boolean mask that way;
# the eager path instead ADDS the mask to the scores (True -> +1, False -> +0), which masks nothing (the stack would
# see every row, future ones included). torch 1.13 has no SDPA, so the mask is turned into the additive form eager
# expects (0 where visible, the dtype's minimum elsewhere): the model's intended (SDPA) behaviour.
_create_causal_mask = modeling_lfm2.create_causal_mask


def _additive_causal_mask(*args, **kwargs):
    mask = _create_causal_mask(*args, **kwargs)
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
        dtype = kwargs["inputs_embeds"].dtype
        mask = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
    return mask


modeling_lfm2.create_causal_mask = _additive_causal_mask

PROVENANCE = {
    "transformers": transformers.__version__,
    "transformers_commit": TF_COMMIT,
    "laid_over": [{"file": v[0], "commit": v[1], "sha256": v[2], "use": "unmodified"} for v in OVERLAY_FILES.values()],
    "torch": torch.__version__,
    "numpy": np.__version__,
    "python": sys.version.split()[0],
    "dtype": "float32",
    "threads": 1,
    "compat_shims": list(hfenv.COMPAT_SHIMS) + [
        "models/lfm2_audio laid over the v5.2.0 tree as in make_audio_fixtures.py (empty __init__.py)",
        "attn_implementation='eager' (set_attn_implementation after construction, attn_implementation='eager' on "
        "reload): torch 1.13 has no F.scaled_dot_product_attention",
        "modeling_lfm2.create_causal_mask wrapped: the detokenizer's 4-D boolean sliding-window mask (returned as-is) "
        "becomes additive (0 visible / finfo.min masked) because the eager path adds a mask to the scores (a boolean "
        "one would add +1 and mask nothing); SDPA, the default with torch >= 2, reads the boolean mask as visibility: "
        "the fixture is the SDPA semantics, checked causal (changing a later frame leaves earlier rows' outputs)"],
    "generator": "tools/audio_reference/make_detokenizer_fixtures.py",
}

SEED = 5901
HIDDEN = 24  # small: emb.emb.weight is [8 * 2048, hidden] float32 (1.5 MB)
LAYER_TYPES = ["conv", "sliding_attention", "conv", "sliding_attention"]
SEQUENCES = [("codes_3", 3, SEED + 1), ("codes_23", 23, SEED + 2)]  # 23 frames = 138 rows > window 30


def build_config():
    return Lfm2Config(vocab_size=16, hidden_size=HIDDEN, intermediate_size=48, num_hidden_layers=len(LAYER_TYPES),
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, norm_eps=1e-5,
                      conv_L_cache=3, conv_bias=False, layer_types=LAYER_TYPES, block_auto_adjust_ff_dim=False,
                      tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      sliding_window=30, output_size=1282)


def randomize(model, seed):
    """Weights N(0, 1/fan_in), biases N(0, 0.1^2), RMSNorm gains U(0.5, 1.5), embeddings N(0, 1); istft.window (a
    buffer, torch.hann_window(1280)) kept."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name and name.endswith(".weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif name.endswith("emb.weight") or name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.dim() >= 2:
                fan_in = int(np.prod(p.shape[1:]))
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            else:
                raise RuntimeError(f"randomize: no rule for {name} {tuple(p.shape)}")


def write_f32(folder, rel, arr):
    a = np.ascontiguousarray(np.asarray(arr, dtype="<f4"))
    p = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    b = a.tobytes()
    with open(p, "wb") as f:
        f.write(b)
    return {"file": rel, "dtype": "float32", "shape": list(a.shape), "sha256": hashlib.sha256(b).hexdigest()}


def write_i32(folder, rel, arr):
    a = np.ascontiguousarray(np.asarray(arr, dtype="<i4"))
    p = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    b = a.tobytes()
    with open(p, "wb") as f:
        f.write(b)
    return {"file": rel, "dtype": "int32", "shape": list(a.shape), "sha256": hashlib.sha256(b).hexdigest()}


class Capture:
    """The LFM2 stack's input (layer 0's first argument), its output and `lin`'s output."""

    def __init__(self, model):
        self.got = {}
        model.lfm.layers[0].register_forward_pre_hook(lambda m, a: self.got.__setitem__("upsampled", a[0].detach().clone()))
        model.lfm.register_forward_hook(
            lambda m, a, o: self.got.__setitem__("hidden", o.last_hidden_state.detach().clone()))
        model.lin.register_forward_hook(lambda m, a, o: self.got.__setitem__("lin", o.detach().clone()))


def run(model, codes):
    with torch.no_grad():
        wav = model(torch.from_numpy(codes.T[None].astype(np.int64)))  # [1, 8, frames]
    return wav


def main():
    out = ARGS.out
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    torch.manual_seed(SEED)
    det = Lfm2AudioDetokenizer(build_config()).eval()
    det.set_attn_implementation("eager")
    randomize(det, SEED)
    tmp = tempfile.mkdtemp(prefix="detok_")
    det.save_pretrained(tmp)
    # The module saves its deep-copied config, whose layer_types it rewrote ("sliding_attention" -> "full_attention",
    # the mask is its own); a checkpoint's audio_detokenizer/config.json keeps "sliding_attention" (the config the
    # module is built from), so the saved file gets the original layer_types back, and the reload below reads it.
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path) as f:
        saved = json.load(f)
    saved["layer_types"] = LAYER_TYPES
    with open(cfg_path, "w") as f:
        json.dump(saved, f, indent=2, sort_keys=True)
        f.write("\n")
    model = Lfm2AudioDetokenizer.from_pretrained(tmp, attn_implementation="eager").eval()
    sd_a, sd_b = det.state_dict(), model.state_dict()
    assert sd_a.keys() == sd_b.keys()
    for k in sd_a:
        assert torch.equal(sd_a[k], sd_b[k]), k
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(tmp, name), os.path.join(out, name))
    cap = Capture(model)
    seqs = []
    for name, frames, seed in SEQUENCES:
        codes = np.random.default_rng(seed).integers(0, 2048, size=(frames, 8)).astype(np.int32)  # frame-major
        wav = run(model, codes)
        again = run(det, codes)
        assert torch.equal(wav, again), "reloaded model differs"
        got = dict(cap.got)
        rows = 6 * frames
        # Causal: a different last frame leaves every earlier row's lin output unchanged.
        if frames > 1:
            other = codes.copy()
            other[-1] = (other[-1] + 1) % 2048
            run(model, other)
            assert torch.equal(cap.got["lin"][0, :rows - 6], got["lin"][0, :rows - 6]), "not causal"
            assert not torch.equal(cap.got["lin"][0, rows - 6:], got["lin"][0, rows - 6:])
        assert tuple(got["upsampled"].shape) == (1, rows, HIDDEN)
        assert tuple(got["lin"].shape) == (1, rows, 1282)
        assert tuple(wav.shape) == (1, 1920 * frames)
        seqs.append({
            "name": name, "frames": frames, "rows": rows, "samples": int(wav.shape[1]),
            "codes": write_i32(out, f"outputs/{name}.codes.i32", codes),
            "upsampled": write_f32(out, f"outputs/{name}.upsampled.f32", got["upsampled"][0].numpy()),
            "hidden": write_f32(out, f"outputs/{name}.hidden.f32", got["hidden"][0].numpy()),
            "lin": write_f32(out, f"outputs/{name}.lin.f32", got["lin"][0].numpy()),
            "waveform": write_f32(out, f"outputs/{name}.waveform.f32", wav[0].numpy()),
            "waveform_absmax": float(wav.abs().max()),
            "log_magnitude_range": [float(got["lin"][0, :, :641].min()), float(got["lin"][0, :, :641].max())],
        })
    ref = {"fixture": "detokenizer_tiny", "seed": SEED, "provenance": PROVENANCE,
           "what": "tiny random Lfm2AudioDetokenizer (hidden %d, layers %s, heads 4, kv 2, sliding_window 30); "
                   "codes [frames, 8] frame-major int32 in 0..2047 (the module takes [1, 8, frames])"
                   % (HIDDEN, LAYER_TYPES),
           "sequences": seqs}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    shutil.rmtree(tmp)
    shutil.rmtree(_OVERLAY_TMP)
    print("wrote", out)


main()
