#!/usr/bin/env python3
"""Regenerates tests/data/hf_vl: LFM2-VL reference fixtures computed by the unmodified Hugging Face
transformers source (v5.2.0) on Debian's CPU PyTorch 1.13.1 / torchvision 0.14.1 / PIL 9.4.

    /usr/bin/python3 tools/vl_reference/make_vl_fixtures.py [--out tests/data/hf_vl] [--lfm /path/to/build/lfm]
        [--hf-ref ../shared/tools/hf_reference] [--only images,preprocess,models]

transformers is imported through ../shared/tools/hf_reference (hfenv + vl_compat); nothing from
transformers is copied into the repository.  `--lfm` is an existing `lfm` binary, used only for
`lfm tokenize` (our tokenizer turns the processor's expanded prompt text into ids).
See tools/vl_reference/README.md and tests/data/hf_vl/README.md.
"""
import argparse
import hashlib
import io
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "hf_vl"))
ap.add_argument("--hf-ref", default=os.path.join(REPO, "..", "shared", "tools", "hf_reference"))
ap.add_argument("--lfm", default=os.path.join(REPO, "build", "lfm") if os.path.exists(os.path.join(REPO, "build", "lfm"))
                else "/work/main/build/lfm")
ap.add_argument("--only", default="images,preprocess,models")
ARGS = ap.parse_args()
if not os.path.isdir(ARGS.hf_ref) and os.path.isdir("/work/shared/tools/hf_reference"):  # a git worktree elsewhere
    ARGS.hf_ref = "/work/shared/tools/hf_reference"
STAGES = set(ARGS.only.split(","))

sys.path.insert(0, os.path.abspath(ARGS.hf_ref))
import hfenv  # noqa: E402

hfenv.setup("5.2.0")
import vl_compat  # noqa: E402,F401
import torch  # noqa: E402
import torchvision  # noqa: E402
import PIL  # noqa: E402
from PIL import Image  # noqa: E402
import transformers  # noqa: E402
from transformers.image_utils import load_image, make_nested_list_of_images  # noqa: E402
from transformers import Lfm2VlImageProcessorFast  # noqa: E402
from transformers.models.lfm2_vl import image_processing_lfm2_vl_fast as ipmod  # noqa: E402
from transformers.models.lfm2_vl.processing_lfm2_vl import Lfm2VlProcessor  # noqa: E402

torch.set_num_threads(1)
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
OUT = os.path.abspath(ARGS.out)
IMG_DIR = os.path.join(OUT, "images")
SHIMS = list(hfenv.COMPAT_SHIMS)
VL_SHIMS = [s for s in SHIMS if any(k in s for k in ("torchvision", "AddedToken", "_check_with", "_check_tensor_all"))]
PROVENANCE = {
    "transformers": transformers.__version__,
    "transformers_commit": "7d9754a05193eb79b1d86aa744b622b8068008cd",
    "torch": torch.__version__,
    "torchvision": torchvision.__version__,
    "PIL": PIL.__version__,
    "numpy": np.__version__,
    "python": sys.version.split()[0],
    "attn_implementation": "eager",
    "dtype": "float32",
    "threads": 1,
    "compat_shims": SHIMS,
    "vl_compat_shims": VL_SHIMS,
}


# ----------------------------------------------------------------------------------------------------------------
# small helpers
def sha256(b):
    return hashlib.sha256(b).hexdigest()


def save_safetensors(path, tensors, metadata=None):
    """Minimal safetensors writer (numpy arrays, C order, little endian), keys sorted, 8-byte aligned header."""
    dt = {np.dtype("float32"): "F32", np.dtype("uint8"): "U8", np.dtype("int32"): "I32", np.dtype("int64"): "I64"}
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k])
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        b = a.tobytes()
        header[k] = {"dtype": dt[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    rev = {"F32": np.float32, "U8": np.uint8, "I32": np.int32, "I64": np.int64, "BF16": None, "F16": np.float16}
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], np.frombuffer(data[a:b], dtype=rev[v["dtype"]]).reshape(v["shape"]) if rev[v["dtype"]] else None)
    return out


def _dumps(o, ind=0):
    """JSON with dicts indented one key per line and every list of scalars / nested scalar lists on one line."""
    def flat(x):
        return not isinstance(x, dict) and (not isinstance(x, list) or all(flat(y) for y in x))
    if isinstance(o, dict):
        if not o:
            return "{}"
        pad = " " * (ind + 1)
        return "{\n" + ",\n".join(pad + json.dumps(k) + ": " + _dumps(v, ind + 1) for k, v in o.items()) + "\n" + " " * ind + "}"
    if isinstance(o, list) and not flat(o):
        pad = " " * (ind + 1)
        return "[\n" + ",\n".join(pad + _dumps(v, ind + 1) for v in o) + "\n" + " " * ind + "]"
    return json.dumps(o, separators=(", ", ": ") if not isinstance(o, list) else (",", ":"), ensure_ascii=False)


def write_json(path, obj):
    json.loads(_dumps(obj))  # round-trip check
    with open(path, "w", encoding="utf-8") as f:
        f.write(_dumps(obj))
        f.write("\n")


def r7(x):
    """nested list rounded to 7 significant digits (activations.json style)"""
    a = np.asarray(x, dtype=np.float64)
    return json.loads(json.dumps(np.vectorize(lambda v: float(f"{v:.7g}"))(a).tolist())) if a.size else a.tolist()


# ----------------------------------------------------------------------------------------------------------------
# 1. test images (PIL, deterministic)
def _smooth(w, h, seed, channels=3, noise=6.0, edges=True):
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    u, v = xx / max(w - 1, 1), yy / max(h - 1, 1)
    chans = []
    for c in range(channels):
        ph = rng.uniform(0, 2 * np.pi, 3)
        fr = rng.uniform(1.0, 4.0, 3)
        base = 128 + 60 * np.sin(2 * np.pi * fr[0] * u + ph[0]) * np.cos(2 * np.pi * fr[1] * v + ph[1]) \
            + 40 * np.sin(2 * np.pi * fr[2] * (u + v) + ph[2])
        if edges:  # a hard-edged rectangle and a diagonal step so resizing sees edges
            x0, x1 = int(w * 0.2), int(w * 0.55)
            y0, y1 = int(h * 0.3), int(h * 0.7)
            base[y0:y1, x0:x1] += (70 if c % 2 == 0 else -70)
            base[(u - v) > 0.4] -= 35
        base += rng.normal(0, noise, size=base.shape)
        chans.append(np.clip(np.rint(base), 0, 255).astype(np.uint8))
    return np.stack(chans, -1)


def make_images():
    os.makedirs(IMG_DIR, exist_ok=True)
    specs = []

    def add(name, note):
        specs.append({"file": name, "note": note})

    Image.fromarray(_smooth(37, 53, 1)).save(os.path.join(IMG_DIR, "rgb_37x53.png"), optimize=False)
    add("rgb_37x53.png", "RGB PNG, 37 wide x 53 tall")
    Image.fromarray(_smooth(300, 97, 2, channels=1)[..., 0], mode="L").save(os.path.join(IMG_DIR, "grey_300x97.png"))
    add("grey_300x97.png", "greyscale ('L') PNG 300x97")
    rgba = _smooth(64, 200, 3, channels=4)
    yy, xx = np.mgrid[0:200, 0:64]
    rgba[..., 3] = np.clip((yy * 255) // 199 ^ (xx * 4), 0, 255).astype(np.uint8)  # varying alpha incl. 0 and 255
    rgba[:8, :, 3] = 0
    rgba[-8:, :, 3] = 255
    Image.fromarray(rgba, mode="RGBA").save(os.path.join(IMG_DIR, "rgba_64x200.png"))
    add("rgba_64x200.png", "RGBA PNG 64x200 with varying alpha (load_image's convert('RGB') drops alpha, no compositing)")
    pal = Image.fromarray(_smooth(123, 77, 4)).quantize(colors=37, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    pal.info["transparency"] = 0
    pal.save(os.path.join(IMG_DIR, "palette_123x77.png"), transparency=0)
    add("palette_123x77.png", "palette ('P') PNG 123x77, 37 colours, tRNS marks index 0 transparent (ignored by convert('RGB'))")
    ex = Image.fromarray(_smooth(160, 90, 5))
    exif = Image.Exif()
    exif[0x0112] = 6
    ex.save(os.path.join(IMG_DIR, "exif6_160x90.jpg"), quality=90, exif=exif.tobytes())
    add("exif6_160x90.jpg", "baseline JPEG stored 160x90 (4:2:0, quality 90) with EXIF Orientation=6: loads as 90x160")
    Image.fromarray(_smooth(100, 150, 6)).save(os.path.join(IMG_DIR, "lossless_100x150.webp"), lossless=True)
    add("lossless_100x150.webp", "lossless WebP 100x150")
    Image.fromarray(_smooth(7, 500, 7)).save(os.path.join(IMG_DIR, "thin_7x500.png"))
    add("thin_7x500.png", "RGB PNG 7x500 (very thin)")
    Image.fromarray(_smooth(1, 61, 8, edges=False)).save(os.path.join(IMG_DIR, "line_1x61.png"))
    add("line_1x61.png", "RGB PNG 1 pixel wide, 61 tall")
    Image.fromarray(_smooth(5, 5, 9, edges=False, noise=30)).save(os.path.join(IMG_DIR, "tiny_5x5.png"))
    add("tiny_5x5.png", "RGB PNG 5x5")
    Image.fromarray(_smooth(200, 100, 10)).save(os.path.join(IMG_DIR, "wide_200x100.png"))
    add("wide_200x100.png", "RGB PNG 200x100: at config b the 2:1 grid tie (2x1 vs 4x2) goes to 4x2 by area, "
        "and round(12.5) = 12 (half to even) in the too-large check")
    Image.fromarray(_smooth(1100, 620, 11, noise=2.0)).save(os.path.join(IMG_DIR, "large_1100x620.jpg"), quality=85)
    add("large_1100x620.jpg", "baseline JPEG 1100x620 (4:2:0, quality 85): tiled 2x1 + thumbnail at LFM2-VL's defaults")
    for s in specs:
        p = os.path.join(IMG_DIR, s["file"])
        s["bytes"] = os.path.getsize(p)
        s["file_sha256"] = sha256(open(p, "rb").read())
        with Image.open(p) as im:
            s["stored_mode"], s["stored_size_wh"] = im.mode, list(im.size)
    return specs


IMAGE_ORDER = ["rgb_37x53.png", "grey_300x97.png", "rgba_64x200.png", "palette_123x77.png", "exif6_160x90.jpg",
               "lossless_100x150.webp", "thin_7x500.png", "line_1x61.png", "tiny_5x5.png", "wide_200x100.png",
               "large_1100x620.jpg"]


# ----------------------------------------------------------------------------------------------------------------
# 2. decoded pixels (transformers.image_utils.load_image: exif_transpose + convert('RGB'))
def decode_images(specs):
    tensors, meta = {}, []
    for s in specs:
        p = os.path.join(IMG_DIR, s["file"])
        im = load_image(p)
        a = np.asarray(im, dtype=np.uint8)
        assert a.ndim == 3 and a.shape[2] == 3
        h, w = a.shape[:2]
        e = {"file": s["file"], "width": w, "height": h, "sha256_hwc_u8": sha256(a.tobytes()),
             "sum": int(a.astype(np.int64).sum())}
        if a.size <= 200_000:
            tensors[s["file"]] = a
            e["raw_in_safetensors"] = s["file"]
        else:
            rows = sorted({0, h // 2, h - 1})
            e["sample_rows"] = rows
            for r in rows:
                tensors[f"{s['file']}:row{r}"] = a[r]
            e["raw_in_safetensors"] = None
        meta.append(e)
    save_safetensors(os.path.join(OUT, "decoded.safetensors"), tensors, {"layout": "HWC uint8 RGB"})
    return meta


# ----------------------------------------------------------------------------------------------------------------
# 3. preprocessing
CONFIG_A = dict(downsample_factor=2, encoder_patch_size=16, tile_size=512, min_image_tokens=64, max_image_tokens=256,
                min_tiles=2, max_tiles=10, use_thumbnail=True, do_image_splitting=True, max_pixels_tolerance=2.0,
                image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], rescale_factor=1 / 255, do_rescale=True,
                do_normalize=True, do_resize=True, resample=2, size={"height": 512, "width": 512}, do_pad=True)
CONFIG_B = dict(CONFIG_A, encoder_patch_size=8, tile_size=64, min_image_tokens=4, max_image_tokens=16)


class ResizeLog:
    """Records every tvF.resize call the processor makes (input shape, size, antialias) - for documentation."""

    def __init__(self):
        self.calls = []
        self.orig = ipmod.tvF.resize

    def __enter__(self):
        log = self

        def resize(img, size, interpolation=None, max_size=None, antialias=True):
            out = log.orig(img, size, interpolation=interpolation, antialias=antialias)
            log.calls.append({"in_shape": list(img.shape), "in_dtype": str(img.dtype), "size_hw": list(size),
                              "interpolation": str(interpolation), "antialias": antialias,
                              "out_dtype": str(out.dtype)})
            return out

        ipmod.tvF.resize = resize
        return self

    def __exit__(self, *a):
        ipmod.tvF.resize = self.orig


def levels_from_pixels(pv):
    """pixel = (level - 127.5) / 127.5 in float32 (the fused rescale+normalise: mean 0.5*255, std 0.5*255).
    Recovers the uint8 level of every value and checks the relation bit for bit."""
    lv = np.rint(pv.astype(np.float64) * 127.5 + 127.5)
    assert lv.min() >= 0 and lv.max() <= 255
    lv = lv.astype(np.uint8)
    back = ((torch.from_numpy(lv.astype(np.float32)) - torch.tensor(127.5)) / torch.tensor(127.5)).numpy()
    assert np.array_equal(back.view(np.uint32), pv.view(np.uint32)), "pixel != (level-127.5)/127.5 bitwise"
    return lv


def patches_to_hwc(lv, gh, gw, p):
    """[gh*gw, p*p*3] (row-major patches; inside a patch: row, column, channel) -> [gh*p, gw*p, 3]"""
    return lv.reshape(gh, gw, p, p, 3).transpose(0, 2, 1, 3, 4).reshape(gh * p, gw * p, 3)


def run_processor(ip, paths):
    """What Lfm2VlProcessor.__call__ does for images (fetch_images, make_nested_list_of_images, image processor with
    return_row_col_info=True, the processor's default images_kwargs)."""
    images = ip.fetch_images(paths)
    batched = make_nested_list_of_images(images)
    with ResizeLog() as log:
        out = ip(batched, return_row_col_info=True)
    return batched, out, log.calls


def preprocess(name, cfg, png_dir=None):
    ip = Lfm2VlImageProcessorFast(**cfg)
    per_image, tensors = [], {}
    p = cfg["encoder_patch_size"]
    for f in IMAGE_ORDER:
        entry = {"file": f}
        try:
            batched, out, calls = run_processor(ip, [os.path.join(IMG_DIR, f)])
        except Exception as e:  # noqa: BLE001
            entry["hf_error"] = f"{type(e).__name__}: {e}"
            per_image.append(entry)
            continue
        pv = out["pixel_values"].numpy()
        mask = out["pixel_attention_mask"].numpy()
        ss = out["spatial_shapes"].numpy()
        rows = int(np.array(out["image_rows"]).reshape(-1)[0])
        cols = int(np.array(out["image_cols"]).reshape(-1)[0])
        size_hw = [int(x) for x in np.array(out["image_sizes"]).reshape(-1)[:2]]
        n_tiles = pv.shape[0]
        thumb = rows * cols > 1 and cfg["use_thumbnail"]
        assert n_tiles == rows * cols + (1 if thumb else 0)
        entry.update({"input_wh": list(batched[0][0].size), "rows": rows, "cols": cols, "thumbnail": bool(thumb),
                      "image_size_hw": size_hw, "n_tiles": n_tiles, "max_num_patches": int(pv.shape[1]),
                      "patch_dim": int(pv.shape[2]), "resize_calls": calls})
        tok = Lfm2VlProcessor._compute_tokens_per_tile(None, cfg["tile_size"], p, cfg["downsample_factor"])
        tok_img = Lfm2VlProcessor._compute_tokens_for_image(None, size_hw, p, cfg["downsample_factor"])
        tiles = []
        for t in range(n_tiles):
            gh, gw = int(ss[t][0]), int(ss[t][1])
            n = gh * gw
            valid = int(mask[t].sum())
            m_ok = bool((mask[t][:valid] == 1).all() and (mask[t][valid:] == 0).all())
            tile = {"index": t, "kind": ("thumbnail" if thumb and t == n_tiles - 1 else ("tile" if n_tiles > 1 else "single")),
                    "spatial_shape": [gh, gw], "pixel_hw": [gh * p, gw * p], "mask_ones": valid, "mask_prefix_ok": m_ok}
            if tile["kind"] == "tile":
                tile["row_col"] = [t // cols + 1, t % cols + 1]
            vals = pv[t][:n]
            assert valid == n or (n > mask.shape[1] and valid == mask.shape[1]), (valid, n)
            if valid != n:
                tile["note"] = (f"spatial_shape {gh}x{gw} = {n} patches > max_num_patches {mask.shape[1]}: pixel_values are "
                                f"not padded (shape [{pv.shape[1]}, {pv.shape[2]}]) and pixel_attention_mask is {mask.shape[1]} "
                                "ones; the model's unpadding (mask.sum()) then cannot reshape: transformers fails on this image")
                entry["model_would_fail"] = True
            assert np.all(pv[t][n:] == 0)
            lv = levels_from_pixels(vals)
            tile["sha256_levels_u8"] = sha256(lv.tobytes())
            tile["sha256_pixel_values_f32le"] = sha256(vals.astype("<f4").tobytes())
            tile["tokens"] = tok if tile["kind"] == "tile" else tok_img
            key = f"{f}/{t}"
            if png_dir is None:
                tensors[key + "/levels"] = lv
                tile["tensor"] = key + "/levels"
            else:  # lossless PNG of the tile's levels in image layout (H, W, RGB); keeps the folder small
                os.makedirs(png_dir, exist_ok=True)
                png = f"{os.path.splitext(f)[0]}.{t}.png"
                hwc = patches_to_hwc(lv, gh, gw, p)
                Image.fromarray(hwc).save(os.path.join(png_dir, png), optimize=True)
                with Image.open(os.path.join(png_dir, png)) as chk:
                    assert np.array_equal(np.asarray(chk), hwc)
                tile["png"] = os.path.basename(png_dir) + "/" + png
            tiles.append(tile)
        entry["tiles"] = tiles
        entry["tokens_per_tile"] = tok
        entry["tokens_for_image"] = tok_img
        entry["total_image_tokens"] = sum(t["tokens"] for t in tiles)
        per_image.append(entry)
    meta = {"config": cfg, "processor_dict": json.loads(json.dumps(ip.to_dict(), default=str)), "images": per_image}
    return meta, tensors


# ----------------------------------------------------------------------------------------------------------------
# 4. tokenizer for the tiny checkpoints (from tests/data/tokenizer/tokenizer.json, LFM2's vocabulary)
VOCAB = 1024
IMAGE_TOKEN_ID = 396


def vl_special_names():
    names = {396: "<image>", 497: "<|img_thumbnail|>", 498: "<|image_start|>", 499: "<|image_end|>", 500: "<|image_split|>"}
    for r in range(1, 11):
        for c in range(1, 11):
            names[397 + (r - 1) * 10 + (c - 1)] = f"<|img_row_{r}_col_{c}|>"
    return names


def byte_level_chars():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def build_tokenizer(dst):
    src = os.path.join(REPO, "tests", "data", "tokenizer")
    tj = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
    tc = json.load(open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8"))
    ren = vl_special_names()
    old_names = {}
    added = []
    for a in tj["added_tokens"]:
        if a["id"] > 500:
            continue
        a = dict(a)
        if a["id"] in ren:
            old_names[a["content"]] = ren[a["id"]]
            a["content"] = ren[a["id"]]
        added.append(a)
    assert all(a["id"] in ren or a["id"] < 396 for a in added) and all(i in [a["id"] for a in added] for i in ren)
    vocab = {}
    for k, i in tj["model"]["vocab"].items():
        if i < VOCAB:
            vocab[old_names.get(k, k)] = i
    assert len(set(vocab.values())) == len(vocab)
    for ch in byte_level_chars():
        assert ch in vocab and vocab[ch] < VOCAB, ch
    merges = []
    for m in tj["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in vocab and b in vocab and (a + b) in vocab:
            merges.append(m)
    tj["added_tokens"] = added
    tj["model"]["vocab"] = dict(sorted(vocab.items(), key=lambda kv: kv[1]))
    tj["model"]["merges"] = merges
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    atd = {}
    for k, v in tc["added_tokens_decoder"].items():
        if int(k) <= 500:
            v = dict(v)
            v["content"] = ren.get(int(k), v["content"])
            atd[k] = v
    tc["added_tokens_decoder"] = atd
    tc.pop("chat_template", None)
    tc["model_max_length"] = 128000
    tc["image_token"] = "<image>"  # informational; the processor reads tokenizer.image_token if present
    with open(os.path.join(dst, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=2)
        f.write("\n")
    ids = sorted(vocab.values())
    return {"vocab_entries": len(vocab), "max_id": ids[-1], "missing_ids_below_vocab": [i for i in range(VOCAB) if i not in set(ids)],
            "merges": len(merges), "renamed": {str(k): v for k, v in sorted(ren.items())}}


# The LFM2-VL chat template (as in LiquidAI/LFM2-VL-*: content parts, an image part renders as "<image>").
# Written here (minimal), not copied: none of ../shared/assets/lfm2/chat_templates handles image parts.
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{- '<image>' -}}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def lfm_tokenize(model_dir, text):
    """ids of `text` with OUR tokenizer (lfm tokenize, special tokens split out, BOS added by the template processor)."""
    import tempfile
    with tempfile.NamedTemporaryFile("wb", suffix=".txt") as tf:
        tf.write(text.encode("utf-8"))
        tf.flush()
        # --no-special: the processor tokenizes with add_special_tokens=False; BOS is the template's bos_token text
        p = subprocess.run([ARGS.lfm, "tokenize", "-m", model_dir, "--json", "--no-special", "--file", tf.name],
                           capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(f"lfm tokenize failed: {p.stderr.decode()}")
    return json.loads(p.stdout)


# ----------------------------------------------------------------------------------------------------------------
# 5. tiny random LFM2-VL checkpoints and their reference outputs
VARIANTS = {
    "lfm2vl_a_tied_ln": dict(
        seed=1000, projector_use_layernorm=True, tie=True, projector_hidden_size=48,
        layer_types=["conv", "full_attention", "conv", "full_attention"], cases=None, init_range=0.05, embed_scale=0.4),
    "lfm2vl_b_untied_noln": dict(
        seed=2000, projector_use_layernorm=False, tie=False, projector_hidden_size=40,
        layer_types=["full_attention", "conv", "conv"], cases=["one_image", "two_images", "text_only"], init_range=0.05),
}
N_GREEDY = 12
MIN_MARGIN = 5e-3
MIN_DISTINCT = 3  # a random model that repeats one token whatever the input would make greedy agreement a weak test
CASES = [  # (name, user content parts, images)
    ("one_image", [{"type": "image"}, {"type": "text", "text": "Describe this."}], ["rgb_37x53.png"]),
    ("two_images", [{"type": "image"}, {"type": "text", "text": "and"}, {"type": "image"},
                    {"type": "text", "text": "Compare."}], ["rgb_37x53.png", "exif6_160x90.jpg"]),
    ("large_image", [{"type": "image"}, {"type": "text", "text": "Caption:"}], ["large_1100x620.jpg"]),
    ("text_only", [{"type": "text", "text": "Hello, who are you?"}], []),
]


def make_config(v):
    from transformers import Lfm2VlConfig
    vision = dict(model_type="siglip2_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_channels=3, num_patches=64, patch_size=CONFIG_B["encoder_patch_size"],
                  hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, attention_dropout=0.0, vision_use_head=False)
    text = dict(model_type="lfm2", vocab_size=VOCAB, hidden_size=64, intermediate_size=192, num_hidden_layers=len(v["layer_types"]),
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128000, norm_eps=1e-5,
                conv_bias=False, conv_L_cache=3, block_multiple_of=32, block_ffn_dim_multiplier=1.0,
                block_auto_adjust_ff_dim=True, layer_types=v["layer_types"], rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                bos_token_id=1, eos_token_id=7, pad_token_id=0, tie_word_embeddings=v["tie"], initializer_range=v["init_range"])
    cfg = Lfm2VlConfig(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN_ID, projector_hidden_act="gelu",
                       projector_hidden_size=v["projector_hidden_size"], projector_bias=True,
                       projector_use_layernorm=v["projector_use_layernorm"], downsample_factor=CONFIG_B["downsample_factor"],
                       tie_word_embeddings=v["tie"])
    for c in (cfg, cfg.vision_config, cfg.text_config):
        c._attn_implementation = "eager"
    return cfg


def make_processor_stub(ip):
    """An Lfm2VlProcessor without a tokenizer (the Rust tokenizers package is absent here): the attributes that
    expand_text_with_placeholders reads are set exactly as Lfm2VlProcessor.__init__ sets them for a tokenizer without
    image_* attributes (getattr defaults), so the expansion is the processor's own code."""
    proc = Lfm2VlProcessor.__new__(Lfm2VlProcessor)
    proc.image_processor = ip
    proc.image_token = "<image>"
    proc.image_token_id = IMAGE_TOKEN_ID
    proc.image_start_token = "<|image_start|>"
    proc.image_end_token = "<|image_end|>"
    proc.image_thumbnail_token = "<|img_thumbnail|>"
    proc.chat_template = CHAT_TEMPLATE
    return proc


def render_template(messages):
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=True, bos_token="<|startoftext|>")


def model_stage(tok_info):
    from transformers import GenerationConfig, Lfm2VlForConditionalGeneration
    ip = Lfm2VlImageProcessorFast(**CONFIG_B)
    proc = make_processor_stub(ip)
    results = {}
    for vname, v in VARIANTS.items():
        d = os.path.join(OUT, vname)
        if os.path.isdir(d):
            shutil.rmtree(d)
        seed = v["seed"]
        for attempt in range(40):
            torch.manual_seed(seed)
            np.random.seed(seed)
            cfg = make_config(v)
            m0 = Lfm2VlForConditionalGeneration(cfg).eval()
            if v.get("embed_scale"):
                # tied and random, the residual stream is mostly the current token's embedding and the model
                # predicts that token forever; smaller embeddings let the layers (and the image) steer the output
                with torch.no_grad():
                    m0.model.language_model.embed_tokens.weight.mul_(v["embed_scale"])
                    # and a final RMSNorm gain of 3..5 (instead of ones) scales the logits back up, so that the greedy
                    # argmaxes win by clear margins
                    m0.model.language_model.embedding_norm.weight.uniform_(3.0, 5.0)
            os.makedirs(d, exist_ok=True)
            m0.save_pretrained(d)
            model = Lfm2VlForConditionalGeneration.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
            ok, ref, tensors, acts = record_model(model, d, proc, ip, v["cases"], with_acts=(vname == "lfm2vl_a_tied_ln"))
            distinct = min(len(set(c["greedy_ids"])) for c in ref["cases"])
            print(f"{vname} seed {seed}: min greedy margin {ref['min_greedy_margin']:.3g}, fewest distinct greedy tokens {distinct}", flush=True)
            ok = ok and distinct >= MIN_DISTINCT
            if ok:
                break
            shutil.rmtree(d)
            seed += 1
        else:
            raise SystemExit(f"{vname}: no seed with every greedy margin >= {MIN_MARGIN}")
        # tokenizer, template, processor files next to the checkpoint
        build_tokenizer(d)
        with open(os.path.join(d, "chat_template.jinja"), "w") as f:
            f.write(CHAT_TEMPLATE)
        ip.save_pretrained(d)  # preprocessor_config.json (image processor alone, as the LFM2-VL Hub repos hold it)
        with open(os.path.join(d, "processor_config.json"), "w", encoding="utf-8") as f:
            f.write(proc.to_json_string())
        ref["seed"] = seed
        ref["variant"] = v
        ref["provenance"] = PROVENANCE
        ref["tokenizer"] = tok_info
        ref["files"] = sorted(os.listdir(d)) + ["reference.json", "reference.safetensors"]
        save_safetensors(os.path.join(d, "reference.safetensors"), tensors)
        write_json(os.path.join(d, "reference.json"), ref)
        if acts is not None:
            write_json(os.path.join(d, "activations.json"), acts)
            write_json(os.path.join(OUT, "posemb_resize.json"), posemb_resize_records(model))
        results[vname] = ref
    return results


def effective_config(model):
    c = model.config
    tm = model.model.language_model
    tc, vc = c.text_config, c.vision_config
    layers = []
    for i, L in enumerate(tm.layers):
        layers.append({"type": tc.layer_types[i], "ffn_width": int(L.feed_forward.w1.out_features)})
    vt = model.model.vision_tower.vision_model
    return {
        "text": {"vocab_size": tc.vocab_size, "hidden_size": tc.hidden_size, "num_hidden_layers": tc.num_hidden_layers,
                 "layers": layers, "num_attention_heads": tc.num_attention_heads, "num_key_value_heads": tc.num_key_value_heads,
                 "head_dim": tc.hidden_size // tc.num_attention_heads, "norm_eps": tc.norm_eps, "conv_L_cache": tc.conv_L_cache,
                 "conv_bias": tc.conv_bias, "rope_parameters": tc.rope_parameters,
                 "tie_word_embeddings": bool(model.lm_head.weight.data_ptr() == tm.embed_tokens.weight.data_ptr()),
                 "attn_implementation": tc._attn_implementation},
        "vision": {"hidden_size": vc.hidden_size, "intermediate_size": vc.intermediate_size, "num_hidden_layers": vc.num_hidden_layers,
                   "layers_run": len(vt.encoder.layers), "num_attention_heads": vc.num_attention_heads,
                   "head_dim": vc.hidden_size // vc.num_attention_heads, "attention_scale": vt.encoder.layers[0].self_attn.scale,
                   "num_patches": vc.num_patches, "position_embedding_grid": vt.embeddings.position_embedding_size,
                   "patch_size": vc.patch_size, "hidden_act": vc.hidden_act, "layer_norm_eps": vc.layer_norm_eps,
                   "post_layernorm_applied": True, "use_head": bool(vt.use_head), "attn_implementation": vc._attn_implementation},
        "projector": {"downsample_factor": c.downsample_factor, "in_features": model.model.multi_modal_projector.linear_1.in_features,
                      "hidden": c.projector_hidden_size, "out_features": model.model.multi_modal_projector.linear_2.out_features,
                      "use_layernorm": c.projector_use_layernorm, "layernorm_eps": (model.model.multi_modal_projector.layer_norm.eps
                                                                                    if c.projector_use_layernorm else None),
                      "act": c.projector_hidden_act, "act_class": type(model.model.multi_modal_projector.act).__name__,
                      "bias": c.projector_bias},
        "image_token_id": c.image_token_id,
        "config_dict": json.loads(c.to_json_string()),
    }


def checkpoint_tensors(d):
    h = load_safetensors(os.path.join(d, "model.safetensors"))
    return [{"name": k, "dtype": v[0], "shape": v[1]} for k, v in sorted(h.items())]


def margin(row):
    s = np.sort(row.astype(np.float64))
    return float(s[-1] - s[-2])


@torch.no_grad()
def record_model(model, d, proc, ip, only, with_acts):
    from transformers import GenerationConfig
    tensors, cases, min_m = {}, [], float("inf")
    pre_b = json.load(open(os.path.join(OUT, "preprocess_b.json")))
    pre_b = {e["file"]: e for e in pre_b["images"]}
    for cname, content, imgs in CASES:
        if only and cname not in only:
            continue
        text = render_template([{"role": "user", "content": content}])
        c = {"name": cname, "images": imgs, "template_text": text}
        kw = {}
        if imgs:
            batched, out, _ = run_processor(ip, [[os.path.join(IMG_DIR, f) for f in imgs]])
            expanded = proc.expand_text_with_placeholders(
                [text], batched, image_rows=out.pop("image_rows"), image_cols=out.pop("image_cols"),
                image_sizes=out.pop("image_sizes"), use_image_special_tokens=True)[0]
            kw = {"pixel_values": out["pixel_values"], "pixel_attention_mask": out["pixel_attention_mask"],
                  "spatial_shapes": out["spatial_shapes"]}
            ss = out["spatial_shapes"].tolist()
            c["spatial_shapes"] = ss
            c["mask_ones"] = out["pixel_attention_mask"].sum(1).tolist()
            c["pixel_values_padded_shape"] = list(out["pixel_values"].shape)
            # the tiles are those of the images processed one by one (preprocess_b): checked by hash, not stored again
            src = [(f, t) for f in imgs for t in range(pre_b[f]["n_tiles"])]
            assert len(src) == len(ss)
            c["tiles"] = []
            for t, (gh, gw) in enumerate(ss):
                f, k = src[t]
                pv = out["pixel_values"][t, : gh * gw].numpy()
                assert sha256(pv.astype("<f4").tobytes()) == pre_b[f]["tiles"][k]["sha256_pixel_values_f32le"]
                assert np.all(out["pixel_values"][t, gh * gw:].numpy() == 0)
                c["tiles"].append({"image": f, "tile": k, "preprocess_b_tensor": pre_b[f]["tiles"][k]["tensor"],
                                   "spatial_shape": [gh, gw]})
        else:
            expanded = text
        c["expanded_text"] = expanded
        tk = lfm_tokenize(d if os.path.exists(os.path.join(d, "tokenizer.json")) else os.path.join(OUT, "tok_test"), expanded)
        ids = tk["ids"]
        c["input_ids"] = ids
        c["n_tokens"] = len(ids)
        c["n_image_tokens"] = int(sum(1 for i in ids if i == IMAGE_TOKEN_ID))
        ii = torch.tensor([ids])
        if imgs:
            vo = model.model.vision_tower(pixel_values=kw["pixel_values"], spatial_shapes=kw["spatial_shapes"],
                                          pixel_attention_mask=kw["pixel_attention_mask"], return_dict=True)
            feats = model.get_image_features(**kw, return_dict=True).pooler_output
            assert sum(f.shape[0] for f in feats) == c["n_image_tokens"], (c["n_image_tokens"], [f.shape for f in feats])
            worst = 0.0
            for t, (gh, gw) in enumerate(c["spatial_shapes"]):
                tensors[f"{cname}/vision_last_hidden_state/{t}"] = vo.last_hidden_state[t, : gh * gw].numpy()
                # the same tile alone, unpadded, no mask: padding must not leak into the real patches
                alone = model.model.vision_tower(pixel_values=kw["pixel_values"][t:t + 1, : gh * gw],
                                                 spatial_shapes=kw["spatial_shapes"][t:t + 1],
                                                 pixel_attention_mask=torch.ones(1, gh * gw, dtype=torch.int32),
                                                 return_dict=True).last_hidden_state[0]
                worst = max(worst, float((alone - vo.last_hidden_state[t, : gh * gw]).abs().max()))
                tensors[f"{cname}/image_features/{t}"] = feats[t].numpy()
            c["vision_padded_vs_alone_maxdiff"] = worst
            c["image_features_rows"] = [int(f.shape[0]) for f in feats]
        logits = model(input_ids=ii, attention_mask=torch.ones_like(ii), **kw).logits[0].float().numpy()
        tensors[f"{cname}/logits"] = logits
        gc = GenerationConfig(max_new_tokens=N_GREEDY, min_new_tokens=0, do_sample=False, eos_token_id=None, pad_token_id=0,
                              bos_token_id=1, num_beams=1, use_cache=True)
        model.generation_config.eos_token_id = None  # EOS disabled (else the checkpoint's eos 7 is merged back in)
        g = model.generate(input_ids=ii, attention_mask=torch.ones_like(ii), **kw, generation_config=gc,
                           return_dict_in_generate=True, output_logits=True)
        gen = g.sequences[0, len(ids):].tolist()
        assert len(gen) == N_GREEDY
        step = torch.stack([x[0] for x in g.logits]).float().numpy()
        tensors[f"{cname}/greedy_step_logits"] = step
        margins = [margin(r) for r in step]
        assert [int(np.argmax(r)) for r in step] == gen
        c["greedy_ids"] = gen
        c["greedy_margins"] = margins
        c["last_logits_vs_first_step_maxdiff"] = float(np.abs(logits[-1] - step[0]).max())
        c["argmax"] = [int(x) for x in logits.argmax(-1)]
        min_m = min(min_m, min(margins))
        cases.append(c)
    ref = {"effective": effective_config(model), "checkpoint_tensors": checkpoint_tensors(d), "cases": cases,
           "min_greedy_margin": min_m, "processor_config": "b", "processor_kwargs": CONFIG_B}
    ref["tensors_index"] = {k: list(v.shape) for k, v in sorted(tensors.items())}
    acts = None
    if min_m >= MIN_MARGIN and with_acts:
        acts = record_activations(model, ip)
    return min_m >= MIN_MARGIN, ref, tensors, acts


@torch.no_grad()
def record_activations(model, ip):
    """Intermediate tensors of the vision tower + projector for the first tile of the one_image case (rgb_37x53.png at
    config b: one tile of 6x4 patches, padded to 64 patches), in the style of tests/data/hf/*/activations.json."""
    _, out, _ = run_processor(ip, [[os.path.join(IMG_DIR, "rgb_37x53.png")]])
    pv, mask, ss = out["pixel_values"][:1], out["pixel_attention_mask"][:1], out["spatial_shapes"][:1]
    gh, gw = ss[0].tolist()
    n = gh * gw
    vt = model.model.vision_tower.vision_model
    proj = model.model.multi_modal_projector
    entries, seen = [], {}

    def add(name, t, note=None):
        a = t.detach().float().numpy()
        e = {"name": name, "shape": list(a.shape), "dtype": "float32", "values": r7(a)}
        if note:
            e["note"] = note
        entries.append(e)

    hooks = []

    def hook(name, take_input=False, heads=None):
        def f(mod, inp, outp):
            x = inp[0] if take_input else (outp[0] if isinstance(outp, tuple) else outp)
            x = x[0, :n] if x.dim() == 3 and x.shape[1] == pv.shape[1] else x[0]
            if heads:
                x = x.reshape(x.shape[0], heads, -1)
            seen[name] = x.clone()
        return f

    def attn_mask_hook(mod, args, kwargs):
        seen["attention_mask"] = kwargs.get("attention_mask")

    E = vt.embeddings
    hooks.append(E.patch_embedding.register_forward_hook(hook("vision.embeddings.patch_embedding")))
    hooks.append(E.register_forward_hook(hook("vision.embeddings")))
    H = model.config.vision_config.num_attention_heads
    for i, L in enumerate(vt.encoder.layers):
        p = f"vision.encoder.layers.{i}"
        hooks.append(L.layer_norm1.register_forward_hook(hook(p + ".input", take_input=True)))
        hooks.append(L.layer_norm1.register_forward_hook(hook(p + ".layer_norm1")))
        hooks.append(L.self_attn.q_proj.register_forward_hook(hook(p + ".self_attn.q_proj", heads=H)))
        hooks.append(L.self_attn.k_proj.register_forward_hook(hook(p + ".self_attn.k_proj", heads=H)))
        hooks.append(L.self_attn.v_proj.register_forward_hook(hook(p + ".self_attn.v_proj", heads=H)))
        hooks.append(L.self_attn.out_proj.register_forward_hook(hook(p + ".self_attn.out_proj.input", take_input=True)))
        hooks.append(L.self_attn.register_forward_hook(hook(p + ".self_attn")))
        hooks.append(L.layer_norm2.register_forward_hook(hook(p + ".layer_norm2.input", take_input=True)))
        hooks.append(L.layer_norm2.register_forward_hook(hook(p + ".layer_norm2")))
        hooks.append(L.mlp.fc1.register_forward_hook(hook(p + ".mlp.fc1")))
        hooks.append(L.mlp.fc2.register_forward_hook(hook(p + ".mlp.fc2.input", take_input=True)))
        hooks.append(L.mlp.register_forward_hook(hook(p + ".mlp")))
        hooks.append(L.register_forward_hook(hook(p)))
        if i == 0:  # torch 1.13 has no with_kwargs pre-hooks: catch the mask at the eager attention function instead
            pass
    hooks.append(vt.post_layernorm.register_forward_hook(hook("vision.post_layernorm")))
    from transformers.models.siglip2 import modeling_siglip2 as ms
    orig_eager = ms.eager_attention_forward

    def spy(module, q, k, v, attention_mask, *a, **kw):  # records the mask the first layer receives, then defers
        seen.setdefault("attention_mask", attention_mask)
        return orig_eager(module, q, k, v, attention_mask, *a, **kw)

    ms.eager_attention_forward = spy
    try:
        feats = model.get_image_features(pixel_values=pv, spatial_shapes=ss, pixel_attention_mask=mask, return_dict=True)
    finally:
        ms.eager_attention_forward = orig_eager
        for h in hooks:
            h.remove()
    # projector pieces, recomputed step by step with the module's own methods
    x = feats.last_hidden_state[0, :n].reshape(1, gh, gw, -1)
    un = proj.pixel_unshuffle(x)
    f = proj.factor
    C = x.shape[-1]
    ref_un = torch.empty_like(un)
    for i in range(gh // f):
        for j in range(gw // f):
            ref_un[0, i, j] = torch.cat([x[0, f * i + dy, f * j + dx] for dy in range(f) for dx in range(f)])
    assert torch.equal(un, ref_un), "pixel_unshuffle order"
    ln = proj.layer_norm(un) if proj.use_layer_norm else None
    l1 = proj.linear_1(ln if ln is not None else un)
    act = proj.act(l1)
    l2 = proj.linear_2(act)
    assert torch.equal(l2.reshape(-1, l2.shape[-1]), feats.pooler_output[0])
    resized = E.resize_positional_embeddings(E.position_embedding.weight.reshape(E.position_embedding_size, E.position_embedding_size, -1),
                                             ss, max_length=pv.shape[1])[0, :n]
    add("pixel_values", pv[0, :n], "input tile, unpadded: [patches, patch*patch*3], patch = row, column, channel (channel innermost)")
    add("vision.embeddings.patch_embedding", seen["vision.embeddings.patch_embedding"])
    add("vision.embeddings.position_embedding.resized", resized,
        f"the {E.position_embedding_size}x{E.position_embedding_size} table resized to {gh}x{gw} (bilinear, align_corners=False, antialias=True), row-major")
    add("vision.embeddings", seen["vision.embeddings"])
    for i in range(len(vt.encoder.layers)):
        p = f"vision.encoder.layers.{i}"
        for k in (".input", ".layer_norm1", ".self_attn.q_proj", ".self_attn.k_proj", ".self_attn.v_proj",
                  ".self_attn.out_proj.input", ".self_attn", ".layer_norm2.input", ".layer_norm2", ".mlp.fc1",
                  ".mlp.fc2.input", ".mlp", ""):
            add(p + k, seen[p + k])
    add("vision.post_layernorm", seen["vision.post_layernorm"], "= last_hidden_state (post_layernorm IS applied, all layers run)")
    add("projector.pixel_unshuffle", un[0], f"[{gh // f}, {gw // f}, {f * f}*C]: out[i][j][(dy*{f}+dx)*C + c] = in[{f}*i+dy][{f}*j+dx][c]")
    if ln is not None:
        add("projector.layer_norm", ln[0])
    add("projector.linear_1", l1[0])
    add("projector.act", act[0], "exact erf GELU")
    add("projector.linear_2", l2[0], "= get_image_features(...).pooler_output[0] reshaped [rows, cols, hidden]")
    am = seen.get("attention_mask")
    notes = {
        "tile": f"rgb_37x53.png at processor config b: spatial_shape {gh}x{gw} = {n} patches, padded to {pv.shape[1]} "
                "(pixel_attention_mask ones then zeros). Every [patches, ...] entry keeps only the real patches.",
        "heads": "q_proj/k_proj/v_proj are [patches, heads, head_dim] (bias included, before the scale); attention is "
                 "softmax(q k^T * head_dim^-0.5 + mask) v over the real patches only",
        "layer": "x -> x + self_attn(layer_norm1(x)) -> (layer_norm2.input) -> + mlp(layer_norm2(.)); mlp = fc2(gelu_tanh(fc1))",
        "attention_mask": (None if am is None else
                           {"shape": list(am.shape), "dtype": str(am.dtype), "value_at_padded_key": float(am.flatten()[-1]),
                            "value_at_real_key": float(am.flatten()[0]),
                            "note": "additive [batch, 1, query, key] mask from create_bidirectional_mask: padded KEYS get the dtype's "
                                    "minimum; padded query rows are computed but discarded"}),
    }
    return {"provenance": PROVENANCE, "notes": notes, "spatial_shape": [gh, gw], "entries": entries}


def posemb_resize_records(model_a):
    """Siglip2VisionEmbeddings.resize_positional_embeddings on two tables: the tiny checkpoint's 8x8x32 table and a
    seeded 16x16x4 table (the real encoders have 16x16), each to several odd grids."""
    from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings as SE
    out = {"provenance": PROVENANCE, "function": "Siglip2VisionEmbeddings.resize_positional_embeddings "
           "(F.interpolate bilinear, align_corners=False, antialias=True, float32 on CPU)", "tables": []}
    E = model_a.model.vision_tower.vision_model.embeddings
    g = torch.Generator().manual_seed(7)
    tabs = [("lfm2vl_a_tied_ln position_embedding", E.position_embedding.weight.detach().reshape(8, 8, -1),
             [[6, 4], [10, 6], [3, 11], [8, 8], [1, 1]]),
            ("seeded 16x16x4", torch.randn(16, 16, 4, generator=g), [[13, 37], [24, 42], [7, 9], [16, 16]])]
    for name, tab, grids in tabs:
        e = {"name": name, "input_hwd": list(tab.shape), "input": r7(tab.numpy()), "outputs": []}
        for gh, gw in grids:
            r = SE.resize_positional_embeddings(tab, torch.tensor([[gh, gw]]), max_length=gh * gw)[0]
            e["outputs"].append({"grid_hw": [gh, gw], "shape": list(r.shape), "values": r7(r.numpy()),
                                 "layout": "[gh*gw, dim], row-major over the grid"})
        out["tables"].append(e)
    return out


def token_layouts(tok_dir):
    """The processor's own expansion of <image> placeholders (Lfm2VlProcessor.expand_text_with_placeholders on the
    image processor's image_rows/image_cols/image_sizes), at both processor configs, and the ids our tokenizer gives."""
    prompts = [
        ("one_image", "<|startoftext|><|im_start|>user\n<image>Describe this.<|im_end|>\n<|im_start|>assistant\n", ["rgb_37x53.png"]),
        ("two_images", "<|startoftext|><|im_start|>user\n<image>and<image>Compare.<|im_end|>\n<|im_start|>assistant\n",
         ["rgb_37x53.png", "exif6_160x90.jpg"]),
        ("tiled_image", "<|startoftext|><|im_start|>user\nWhat is it?<image><|im_end|>\n<|im_start|>assistant\n", ["large_1100x620.jpg"]),
        ("grid_2x3", "<image>", ["palette_123x77.png"]),
        ("wide_tie_4x2", "<image>", ["wide_200x100.png"]),
    ]
    out = {"provenance": PROVENANCE, "configs": {}}
    for cname, cfg in (("a", CONFIG_A), ("b", CONFIG_B)):
        ip = Lfm2VlImageProcessorFast(**cfg)
        proc = make_processor_stub(ip)
        rows = []
        for name, text, imgs in prompts:
            for special in (True, False):
                if not special and name != "tiled_image":
                    continue
                batched, o, _ = run_processor(ip, [[os.path.join(IMG_DIR, f) for f in imgs]])
                exp = proc.expand_text_with_placeholders([text], batched, image_rows=o["image_rows"], image_cols=o["image_cols"],
                                                         image_sizes=o["image_sizes"], use_image_special_tokens=special)[0]
                ids = lfm_tokenize(tok_dir, exp)["ids"]
                rows.append({"name": name if special else name + "_no_special_tokens", "use_image_special_tokens": special,
                             "images": imgs, "text": text, "expanded_text": exp, "input_ids": ids,
                             "n_image_tokens": ids.count(IMAGE_TOKEN_ID),
                             "per_image": [{"rows": int(r), "cols": int(c), "image_size_hw": [int(x) for x in sz]}
                                           for r, c, sz in zip(np.array(o["image_rows"]).reshape(-1), np.array(o["image_cols"]).reshape(-1),
                                                               np.array(o["image_sizes"]).reshape(-1, 2))]})
        out["configs"][cname] = {"processor_kwargs": cfg, "prompts": rows}
    return out


# ----------------------------------------------------------------------------------------------------------------
def main():
    t0 = time.time()
    os.makedirs(OUT, exist_ok=True)
    if "images" in STAGES:
        specs = make_images()
        dec = decode_images(specs)
        write_json(os.path.join(OUT, "images.json"), {"provenance": PROVENANCE, "images": specs, "decoded": dec})
        print(f"images: {time.time() - t0:.1f}s", flush=True)
    if "preprocess" in STAGES:
        for name, cfg in (("b", CONFIG_B), ("a", CONFIG_A)):
            png_dir = os.path.join(OUT, "preprocess_a_tiles") if name == "a" else None
            if png_dir and os.path.isdir(png_dir):
                shutil.rmtree(png_dir)
            meta, tensors = preprocess(name, cfg, png_dir)
            meta["provenance"] = PROVENANCE
            if tensors:
                save_safetensors(os.path.join(OUT, f"preprocess_{name}.safetensors"), tensors)
            write_json(os.path.join(OUT, f"preprocess_{name}.json"), meta)
            print(f"preprocess {name}: {time.time() - t0:.1f}s", flush=True)
    if "models" in STAGES:
        tok_dir = os.path.join(OUT, "tok_test")
        tok_info = build_tokenizer(tok_dir)
        try:
            write_json(os.path.join(OUT, "token_layout.json"), token_layouts(tok_dir))
            model_stage(tok_info)
        finally:
            shutil.rmtree(tok_dir, ignore_errors=True)
        print(f"models: {time.time() - t0:.1f}s", flush=True)
    print(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
