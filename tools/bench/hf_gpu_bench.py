#!/usr/bin/env python3
"""The peer of `lfm bench --device cuda`: Hugging Face transformers on the same GPU, in bf16.

Loads a folder written by `lfm gen-random --shape 1.2B` (config.json + model.safetensors),
measures prefill of 512 and 2048 tokens and greedy decode of 128 tokens at batch 1, with
transformers' static cache and torch.compile where they run (falling back to the dynamic cache
and eager mode, said in the output), and writes the figures as JSON.
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def timed(fn, reps=3):
    fn()  # warm-up (and compilation)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gen", type=int, default=128)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    vocab = model.config.vocab_size
    res = {"transformers": __import__("transformers").__version__, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0)}
    with torch.inference_mode():
        for n in (512, 2048):
            ids = torch.randint(0, vocab, (1, n), device="cuda")
            s = timed(lambda: model(ids, use_cache=False))
            res[f"pp{n}_tok_s"] = n / s
        prompt = torch.randint(0, vocab, (1, 16), device="cuda")
        modes = [("static+compile", dict(cache_implementation="static", compile_config=None)),
                 ("static", dict(cache_implementation="static")), ("dynamic", {})]
        for label, extra in modes:
            try:
                kw = dict(max_new_tokens=args.gen, min_new_tokens=args.gen, do_sample=False, **extra)
                if label == "static+compile":
                    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=False)
                    kw.pop("compile_config")
                s = timed(lambda: model.generate(prompt, **kw), reps=2)
                res["tg_mode"] = label
                res[f"tg{args.gen}_tok_s"] = args.gen / s
                break
            except Exception as e:  # noqa: BLE001 — report and try the next mode
                res[f"tg_error_{label}"] = str(e)[:300]
    json.dump(res, open(args.out, "w"), indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
