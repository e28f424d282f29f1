#!/usr/bin/env python3
"""Writes the small audio files of this folder with the system's libsndfile (ctypes, no other
dependency): the MP3 that tests/audio_decode_test.cpp decodes where libsndfile has no MPEG encoder,
and the seeds of the fuzz_audio harness (scripts/fuzz.sh). Run from anywhere:
    python3 tests/data/audio/files/make_files.py
Each file is a 440 Hz sine of amplitude 0.5 (stereo files: 440 Hz left, 660 Hz right)."""
import ctypes
import ctypes.util
import math
import os

SF_FORMAT = {"WAV": 0x010000, "AIFF": 0x020000, "FLAC": 0x170000, "OGG": 0x200000, "MPEG": 0x230000}
SUB = {"PCM_16": 0x0002, "PCM_24": 0x0003, "FLOAT": 0x0006, "VORBIS": 0x0060, "OPUS": 0x0064, "MP3": 0x0082}
SFM_WRITE = 0x20

# (file, container, subtype, rate, channels, seconds)
FILES = [
    ("tone440_16k.mp3", "MPEG", "MP3", 16000, 1, 0.5),
    ("tone440_16k_pcm16.wav", "WAV", "PCM_16", 16000, 1, 0.05),
    ("tone_8k_stereo_float.wav", "WAV", "FLOAT", 8000, 2, 0.03),
    ("tone440_22k_pcm24.aiff", "AIFF", "PCM_24", 22050, 1, 0.03),
    ("tone440_16k.flac", "FLAC", "PCM_16", 16000, 1, 0.1),
    ("tone440_16k_vorbis.ogg", "OGG", "VORBIS", 16000, 1, 0.1),
    ("tone_48k_stereo.opus", "OGG", "OPUS", 48000, 2, 0.1),
]


class SF_INFO(ctypes.Structure):
    _fields_ = [("frames", ctypes.c_int64), ("samplerate", ctypes.c_int), ("channels", ctypes.c_int),
                ("format", ctypes.c_int), ("sections", ctypes.c_int), ("seekable", ctypes.c_int)]


def main():
    lib = ctypes.CDLL(ctypes.util.find_library("sndfile") or "libsndfile.so.1")
    lib.sf_open.restype = ctypes.c_void_p
    lib.sf_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(SF_INFO)]
    lib.sf_writef_float.restype = ctypes.c_int64
    lib.sf_writef_float.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64]
    lib.sf_close.argtypes = [ctypes.c_void_p]
    lib.sf_strerror.restype = ctypes.c_char_p
    lib.sf_strerror.argtypes = [ctypes.c_void_p]
    lib.sf_version_string.restype = ctypes.c_char_p
    here = os.path.dirname(os.path.abspath(__file__))
    for name, major, sub, rate, channels, seconds in FILES:
        frames = round(rate * seconds)
        samples = []
        for i in range(frames):
            for c in range(channels):
                samples.append(0.5 * math.sin(2 * math.pi * (440 + 220 * c) * i / rate))
        info = SF_INFO(0, rate, channels, SF_FORMAT[major] | SUB[sub], 0, 0)
        path = os.path.join(here, name)
        f = lib.sf_open(path.encode(), SFM_WRITE, ctypes.byref(info))
        if not f:
            raise SystemExit(f"{name}: {lib.sf_strerror(None).decode()}")
        buf = (ctypes.c_float * len(samples))(*samples)
        if lib.sf_writef_float(f, buf, frames) != frames:
            raise SystemExit(f"{name}: short write")
        lib.sf_close(f)
        print(f"{name}: {os.path.getsize(path)} bytes ({lib.sf_version_string().decode()})")


if __name__ == "__main__":
    main()
