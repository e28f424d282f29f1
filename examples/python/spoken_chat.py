#!/usr/bin/env python3
"""Spoken chat with an LFM2.5-Audio model served by `lfm serve` (OpenAI's audio chat API).

    build/lfm serve -m /path/to/LFM2.5-Audio-1.5B --port 8080 &
    python3 examples/python/spoken_chat.py question.wav [follow-up.wav ...]

Each turn sends a recorded question (input_audio) and gets the reply as text and speech
(message.audio: base64 WAV plus its transcript), saved as reply-<n>.wav. Later turns refer to the
earlier replies by their audio id, so the server puts those spoken turns back into the prompt
(and its prefix cache already holds them). Standard library only.
"""
import base64
import json
import sys
import urllib.request

URL = "http://localhost:8080/v1/chat/completions"


def chat(messages):
    body = {
        "model": "lfm",
        "modalities": ["text", "audio"],
        "audio": {"voice": "us_female", "format": "wav"},
        "messages": messages,
    }
    req = urllib.request.Request(URL, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def main(paths):
    messages = []
    for n, path in enumerate(paths, 1):
        with open(path, "rb") as f:
            clip = base64.b64encode(f.read()).decode()
        messages.append({"role": "user", "content": [{"type": "input_audio",
                                                      "input_audio": {"data": clip, "format": "wav"}}]})
        reply = chat(messages)
        audio = reply["choices"][0]["message"]["audio"]
        with open(f"reply-{n}.wav", "wb") as f:
            f.write(base64.b64decode(audio["data"]))
        usage = reply["usage"]
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        print(f"turn {n}: {audio['transcript']!r} -> reply-{n}.wav "
              f"({usage['prompt_tokens']} prompt tokens, {cached} from the cache)")
        # The assistant's spoken turn, by reference: the server keeps its audio.
        messages.append({"role": "assistant", "audio": {"id": audio["id"]}})


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
