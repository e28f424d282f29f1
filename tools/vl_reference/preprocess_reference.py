#!/usr/bin/env python3
"""Test images and reference outputs for src/image/ (tests/image_*_test.cpp), made by the real stack:
PIL 9.4 (Debian, libjpeg-turbo 2.1.5, libwebp 1.2.4) through transformers' load_image, torch 1.13.1's
interpolate, and transformers v5.2.0's Lfm2VlImageProcessorFast / Lfm2VlProcessor on torchvision 0.14
(with ../shared/tools/hf_reference's shims, recorded in reference.json).

Usage (Debian's python, which has torch):
  /usr/bin/python3 tools/vl_reference/preprocess_reference.py [HF_REFERENCE_DIR] [OUT_DIR]
  defaults: /work/shared/tools/hf_reference, tests/data/image
Writes OUT_DIR/files/* (small test images, hostile files included) and OUT_DIR/reference.json:
  decode:     per file, PIL's load_image result (size, sha256 of the RGB bytes) or the error it raised
  resize:     torch interpolate(bilinear, align_corners=False, antialias=True) outputs on generated inputs
  preprocess: per (image, config), the processor's rows/cols/image_sizes/spatial_shapes, the sha256 of
              each tile's unpadded float32 pixel values, their uint8 levels for small tiles, and the
              prompt text one <image> expands to
Deterministic: fixed seeds, no clock, one thread.
"""
import base64
import hashlib
import io
import json
import os
import struct
import sys
import zlib

HF_DIR = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/tools/hf_reference"
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "image")
sys.path.insert(0, HF_DIR)
import hfenv  # noqa: E402

hfenv.setup("5.2.0")
import vl_compat  # noqa: E402,F401
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
import transformers  # noqa: E402
from transformers.image_utils import load_image  # noqa: E402
from transformers.models.lfm2_vl.image_processing_lfm2_vl_fast import Lfm2VlImageProcessorFast  # noqa: E402
from transformers.models.lfm2_vl.processing_lfm2_vl import Lfm2VlProcessor  # noqa: E402

torch.set_num_threads(1)
FILES = os.path.join(OUT, "files")
os.makedirs(FILES, exist_ok=True)
rng = np.random.default_rng(39)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def smooth_rgb(w, h, seed):
    """A photo-like image (gradients plus noise): JPEG/WebP artefacts and resizes are non-trivial."""
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 7) % 256], -1).astype(np.int32)
    img += r.integers(-40, 40, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


# ---- a small PNG writer (PIL cannot write 2-bit grey, 16-bit RGB(A)/LA, tRNS on every type, or Adam7) ----
def png_chunk(t, data):
    return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)


def pack_rows(samples, depth):
    """samples: [h][n] ints → filter byte 0 + packed row bytes."""
    out = b""
    for row in samples:
        if depth == 8:
            b = bytes(int(v) for v in row)
        elif depth == 16:
            b = b"".join(struct.pack(">H", int(v)) for v in row)
        else:
            per = 8 // depth
            b = bytearray()
            for i in range(0, len(row), per):
                byte = 0
                for k in range(per):
                    v = int(row[i + k]) if i + k < len(row) else 0
                    byte |= v << (8 - depth * (k + 1))
                b.append(byte)
            b = bytes(b)
        out += b"\0" + b
    return out


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(path, pix, color_type, depth, palette=None, trns=None, interlace=False, extra=b""):
    """pix: [h][w][channels] ints at the given depth."""
    pix = np.asarray(pix)
    h, w = pix.shape[:2]
    flat = pix.reshape(h, w, -1)
    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            sub = flat[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += pack_rows(sub.reshape(sub.shape[0], -1), depth)
    else:
        raw = pack_rows(flat.reshape(h, -1), depth)
    data = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, int(interlace)))
    if palette is not None:
        data += png_chunk(b"PLTE", bytes(np.asarray(palette, np.uint8).reshape(-1)))
    if trns is not None:
        data += png_chunk(b"tRNS", trns)
    data += extra + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")
    open(path, "wb").write(data)


def exif_bytes(orientation, typ=3, big_endian=False):
    e = ">" if big_endian else "<"
    head = (b"MM\0*" if big_endian else b"II*\0") + struct.pack(e + "I", 8)
    if typ == 3:
        value = struct.pack(e + "HH", orientation, 0)
    elif typ == 4:
        value = struct.pack(e + "I", orientation)
    else:
        value = bytes([orientation, 0, 0, 0])
    ifd = struct.pack(e + "H", 1) + struct.pack(e + "HHI", 0x0112, typ, 1) + value + struct.pack(e + "I", 0)
    return head + ifd


def make_images():
    files = []

    def add(name):
        files.append(name)
        return os.path.join(FILES, name)

    rgb = smooth_rgb(37, 23, 1)
    Image.fromarray(rgb).save(add("rgb_420.jpg"), quality=85)  # 4:2:0, odd sides (partial MCUs)
    Image.fromarray(rgb).save(add("rgb_444.jpg"), quality=95, subsampling=0)
    Image.fromarray(smooth_rgb(41, 30, 2)).save(add("rgb_422_progressive.jpg"), quality=80, subsampling=1, progressive=True)
    Image.fromarray(smooth_rgb(29, 31, 3)[:, :, 0]).save(add("grey.jpg"), quality=90)
    Image.fromarray(smooth_rgb(21, 17, 4)).convert("CMYK").save(add("cmyk.jpg"), quality=90)
    for o in range(1, 9):  # EXIF orientations on a non-square image
        ex = Image.Exif()
        ex[0x0112] = o
        Image.fromarray(smooth_rgb(19, 11, 10 + o)).save(add(f"exif_orientation_{o}.jpg"), quality=92, exif=ex.tobytes())
    Image.fromarray(smooth_rgb(19, 11, 30)).save(add("exif_orientation_6_bigendian_long.jpg"), quality=92,
                                                 exif=b"Exif\0\0" + exif_bytes(6, typ=4, big_endian=True))

    r = np.random.default_rng(5)
    h, w = 13, 17
    for depth in (1, 2, 4, 8, 16):
        write_png(add(f"grey{depth}.png"), r.integers(0, 2 ** depth, size=(h, w, 1)), 0, depth)
    write_png(add("grey16_low.png"), r.integers(0, 400, size=(h, w, 1)), 0, 16)  # PIL clips "I" to 0..255
    write_png(add("grey8_trns.png"), r.integers(0, 256, size=(h, w, 1)), 0, 8, trns=struct.pack(">H", 7))
    write_png(add("grey_alpha8.png"), r.integers(0, 256, size=(h, w, 2)), 4, 8)
    write_png(add("grey_alpha16.png"), r.integers(0, 65536, size=(h, w, 2)), 4, 16)
    write_png(add("rgb8.png"), r.integers(0, 256, size=(h, w, 3)), 2, 8)
    write_png(add("rgb8_trns.png"), r.integers(0, 256, size=(h, w, 3)), 2, 8, trns=struct.pack(">HHH", 1, 2, 3))
    write_png(add("rgb16.png"), r.integers(0, 65536, size=(h, w, 3)), 2, 16)
    write_png(add("rgba8.png"), r.integers(0, 256, size=(h, w, 4)), 6, 8)
    write_png(add("rgba16.png"), r.integers(0, 65536, size=(h, w, 4)), 6, 16)
    for depth in (1, 2, 4, 8):
        n = 2 ** depth
        pal = r.integers(0, 256, size=(n, 3))
        write_png(add(f"palette{depth}.png"), r.integers(0, n, size=(h, w, 1)), 3, depth, palette=pal,
                  trns=bytes(r.integers(0, 256, size=min(n, 5)).astype(np.uint8)))
    write_png(add("rgb8_interlaced.png"), r.integers(0, 256, size=(h, w, 3)), 2, 8, interlace=True)
    write_png(add("grey2_interlaced.png"), r.integers(0, 4, size=(h, w, 1)), 0, 2, interlace=True)
    write_png(add("rgba16_interlaced.png"), r.integers(0, 65536, size=(h, w, 4)), 6, 16, interlace=True)
    ex = png_chunk(b"eXIf", exif_bytes(8))
    write_png(add("exif_orientation_8.png"), r.integers(0, 256, size=(h, w, 3)), 2, 8, extra=ex)
    xmp = b"XML:com.adobe.xmp\0\0\0\0\0" + b'<x:xmpmeta><rdf:Description tiff:Orientation="5"/></x:xmpmeta>'
    write_png(add("xmp_orientation_5.png"), r.integers(0, 256, size=(h, w, 3)), 2, 8, extra=png_chunk(b"iTXt", xmp))
    raw_profile = "\nexif\n      %d\n%s\n" % (len(exif_bytes(3)) + 6, (b"Exif\0\0" + exif_bytes(3)).hex())
    write_png(add("raw_profile_orientation_3.png"), r.integers(0, 256, size=(h, w, 3)), 2, 8,
              extra=png_chunk(b"tEXt", b"Raw profile type exif\0" + raw_profile.encode()))

    Image.fromarray(smooth_rgb(33, 21, 6)).save(add("lossy.webp"), quality=80)
    Image.fromarray(smooth_rgb(33, 21, 7)).save(add("lossless.webp"), lossless=True)
    rgba = np.concatenate([smooth_rgb(33, 21, 8), r.integers(0, 256, size=(21, 33, 1)).astype(np.uint8)], -1)
    Image.fromarray(rgba, "RGBA").save(add("alpha_lossy.webp"), quality=80)
    Image.fromarray(rgba, "RGBA").save(add("alpha_lossless.webp"), lossless=True)
    frames = [Image.fromarray(smooth_rgb(25, 19, 20 + i)) for i in range(3)]
    frames[0].save(add("animated.webp"), save_all=True, append_images=frames[1:], duration=100, quality=80)
    ex = Image.Exif()
    ex[0x0112] = 6
    Image.fromarray(smooth_rgb(25, 19, 9)).save(add("exif_orientation_6.webp"), quality=85, exif=ex.tobytes())

    # Larger images for the processor (photo-like; JPEG keeps them small).
    for name, (w, h) in {"photo_640x480.jpg": (640, 480), "photo_1500x600.jpg": (1500, 600),
                         "photo_333x1013.jpg": (333, 1013), "photo_97x61.jpg": (97, 61),
                         "photo_250x200.jpg": (250, 200)}.items():
        Image.fromarray(smooth_rgb(w, h, w + h)).save(add(name), quality=70)
    return files


def make_hostile():
    """Files every decoder must refuse cleanly (the C++ tests name the error they expect)."""
    out = {}

    def put(name, data):
        open(os.path.join(FILES, name), "wb").write(data)
        out[name] = len(data)

    jpg = open(os.path.join(FILES, "rgb_420.jpg"), "rb").read()
    png = open(os.path.join(FILES, "rgb8.png"), "rb").read()
    webp = open(os.path.join(FILES, "lossy.webp"), "rb").read()
    put("truncated.jpg", jpg[: len(jpg) * 2 // 3])
    put("truncated_header.jpg", jpg[:40])
    put("truncated.png", png[: len(png) - 40])
    put("truncated.webp", webp[: len(webp) // 2])
    put("wrong_magic.bin", b"GIF89a" + bytes(64))
    # 100000x100000 PNG header with a few bytes of data: refused from the header.
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    put("huge_header.png", b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\0" * 100)) + png_chunk(b"IEND", b""))
    # 65000x65000 JPEG SOF (the largest JPEG can say).
    i = jpg.index(b"\xff\xc0")
    sof = bytearray(jpg)
    sof[i + 5:i + 9] = struct.pack(">HH", 65000, 65000)
    put("huge_header.jpg", bytes(sof))
    # WebP VP8X canvas of 30000x30000 and nothing else (libwebp itself refuses canvases of 2^32 pixels).
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes([0, 0, 0, 0]) + (30000 - 1).to_bytes(3, "little") * 2
    body = b"WEBP" + vp8x
    put("huge_canvas.webp", b"RIFF" + struct.pack("<I", len(body)) + body)
    # Decompression bomb: 8000x8000 1-bit grey, all zero: 8 KB of file, 64 megapixels.
    w = h = 8000
    raw = (b"\0" + bytes(w // 8)) * h
    ihdr = struct.pack(">IIBBBBB", w, h, 1, 0, 0, 0, 0)
    put("bomb_8000x8000.png", b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b""))
    # Palette index past a 2-entry palette (PIL: grey (i, i, i) from its default ramp; not hostile, kept here).
    write_png(os.path.join(FILES, "palette_index_out_of_range.png"), [[[0], [1], [3]]], 3, 2, palette=[[10, 20, 30], [40, 50, 60]])
    out["palette_index_out_of_range.png"] = 0
    return out


def decode_reference(names):
    ref = {}
    for n in names:
        try:
            im = load_image(os.path.join(FILES, n))
            b = im.tobytes()
            ref[n] = {"width": im.width, "height": im.height, "sha256": sha(b)}
            if len(b) <= 3 * 64 * 64:
                ref[n]["rgb_base64"] = base64.b64encode(b).decode()
        except Exception as e:  # noqa: BLE001
            ref[n] = {"error": f"{type(e).__name__}: {e}"[:200]}
    return ref


def gen_input(n):
    """Inputs the C++ test regenerates exactly: float32(((i·2654435761) mod 2^32) >> 8) · (255/2^24)."""
    i = np.arange(n, dtype=np.uint64)
    hsh = ((i * np.uint64(2654435761)) % np.uint64(2 ** 32)) >> np.uint64(8)
    return hsh.astype(np.float32) * np.float32(255.0 / 16777216.0)


def resize_reference():
    cases = [(3, 23, 37, 7, 11), (3, 7, 11, 23, 37), (1, 1, 1, 5, 3), (2, 1, 9, 4, 1), (3, 9, 1, 1, 4),
             (3, 40, 40, 40, 40), (3, 40, 30, 13, 30), (4, 17, 29, 31, 8), (3, 64, 48, 5, 5), (5, 3, 100, 3, 7),
             (3, 19, 19, 32, 32), (16, 8, 8, 13, 11), (3, 100, 3, 9, 2), (1, 33, 1, 1, 1), (3, 31, 47, 47, 31)]
    out = []
    for c, h, w, oh, ow in cases:
        x = torch.from_numpy(gen_input(c * h * w).reshape(1, c, h, w))
        y = torch.nn.functional.interpolate(x, size=(oh, ow), mode="bilinear", align_corners=False, antialias=True)
        out.append({"channels": c, "h": h, "w": w, "out_h": oh, "out_w": ow,
                    "output_f32_base64": base64.b64encode(y.numpy().astype("<f4").tobytes()).decode()})
    return out


CONFIGS = {
    "default": {},
    "small_tiles": {"tile_size": 64, "min_image_tokens": 4, "max_image_tokens": 16, "min_tiles": 2, "max_tiles": 6},
    "small_no_thumbnail": {"tile_size": 64, "min_image_tokens": 4, "max_image_tokens": 16, "use_thumbnail": False},
    "small_no_split": {"tile_size": 64, "min_image_tokens": 4, "max_image_tokens": 16, "do_image_splitting": False},
    "small_two_tiles_tie": {"tile_size": 64, "min_image_tokens": 4, "max_image_tokens": 16, "min_tiles": 2, "max_tiles": 2},
    "small_clip_norm": {"tile_size": 64, "min_image_tokens": 4, "max_image_tokens": 16,
                        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]},
    "small_rescale_only": {"tile_size": 64, "min_image_tokens": 4, "max_image_tokens": 16, "do_normalize": False},
}

PREPROCESS = [  # (image file, config)
    ("photo_640x480.jpg", "default"), ("photo_1500x600.jpg", "default"), ("photo_333x1013.jpg", "default"),
    ("photo_97x61.jpg", "default"), ("rgb_420.jpg", "default"), ("grey2_interlaced.png", "default"),
    ("photo_640x480.jpg", "small_tiles"), ("photo_1500x600.jpg", "small_tiles"), ("photo_333x1013.jpg", "small_tiles"),
    ("photo_97x61.jpg", "small_tiles"), ("rgb_420.jpg", "small_tiles"), ("exif_orientation_6.webp", "small_tiles"),
    ("photo_250x200.jpg", "small_tiles"), ("photo_640x480.jpg", "small_no_thumbnail"), ("photo_640x480.jpg", "small_no_split"),
    ("photo_250x200.jpg", "small_two_tiles_tie"), ("photo_1500x600.jpg", "small_two_tiles_tie"),
    ("photo_333x1013.jpg", "small_clip_norm"), ("photo_97x61.jpg", "small_rescale_only"),
]


def preprocess_reference():
    out = []
    for name, cfg_name in PREPROCESS:
        cfg = CONFIGS[cfg_name]
        proc = Lfm2VlImageProcessorFast(**cfg)
        img = load_image(os.path.join(FILES, name))
        res = proc([[img]], return_row_col_info=True, return_tensors="pt")
        pv, shapes = res["pixel_values"], res["spatial_shapes"].tolist()
        tiles = []
        for t, (ph, pw) in enumerate(shapes):
            v = pv[t, : ph * pw].numpy().astype("<f4")
            entry = {"patches_h": ph, "patches_w": pw, "sha256": sha(v.tobytes())}
            assert float(pv[t, ph * pw:].abs().sum()) == 0.0
            if cfg_name != "default":
                # The uint8 levels behind the values (for a readable diff when the hash differs).
                mean, std = np.array(proc.image_mean, np.float64), np.array(proc.image_std, np.float64)
                x = v.reshape(-1, 3).astype(np.float64)
                lv = x / proc.rescale_factor if not proc.do_normalize else x * std / proc.rescale_factor + mean / proc.rescale_factor
                entry["levels_base64"] = base64.b64encode(np.rint(lv).astype(np.uint8).tobytes()).decode()
            tiles.append(entry)
        # The text one <image> expands to: the real expand_text_with_placeholders on a processor
        # object without a tokenizer (the method needs only these attributes).
        p = Lfm2VlProcessor.__new__(Lfm2VlProcessor)
        p.image_processor = proc
        p.image_token, p.image_start_token = "<image>", "<|image_start|>"
        p.image_end_token, p.image_thumbnail_token = "<|image_end|>", "<|img_thumbnail|>"
        text = p.expand_text_with_placeholders(["<image>"], [[img]], image_rows=res["image_rows"], image_cols=res["image_cols"],
                                               image_sizes=res["image_sizes"], use_image_special_tokens=True, **cfg)[0]
        out.append({"file": name, "config": cfg_name, "rows": int(res["image_rows"][0]), "cols": int(res["image_cols"][0]),
                    "image_size": [int(x) for x in res["image_sizes"][0]], "tiles": tiles, "expanded_text": text})
    return out


def main():
    names = make_images()
    hostile = make_hostile()
    ref = {
        "generator": "tools/vl_reference/preprocess_reference.py",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__, "PIL": Image.__version__,
                     "python": sys.version.split()[0]},
        "compat_shims": list(hfenv.COMPAT_SHIMS),
        "configs": CONFIGS,
        "decode": decode_reference(names + sorted(hostile)),
        "resize": resize_reference(),
        "preprocess": preprocess_reference(),
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(FILES, n)) for n in os.listdir(FILES))
    print(f"{len(os.listdir(FILES))} files, {total} bytes; reference.json {os.path.getsize(os.path.join(OUT, 'reference.json'))} bytes")


if __name__ == "__main__":
    main()
