#!/usr/bin/env python3
"""The peer of `lfm bench --device cuda`: Hugging Face transformers on the same GPU, in bf16.

Loads a folder written by `lfm gen-random --shape 1.2B` (config.json + model.safetensors) and
measures one thing per run, merging its figures into the JSON file --out (so a crash in one mode,
as torch.compile has had, loses only that mode):
  --mode prefill   forward passes of 512 and 2048 tokens (no cache), tokens per second
  --mode static    greedy decode of --gen tokens at batch 1 with the static cache, eager
  --mode compile   the same with torch.compile (mode reduce-overhead)
  --mode dynamic   the same with the default dynamic cache, eager
TF32 is off, as in lfm's float32 paths.
"""
import argparse
import json
import os
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
    ap.add_argument("--mode", choices=["prefill", "static", "compile", "dynamic"], required=True)
    ap.add_argument("--gen", type=int, default=128)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    res = json.load(open(args.out)) if os.path.exists(args.out) else {}
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    vocab = model.config.vocab_size
    res.update({"transformers": __import__("transformers").__version__, "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(0)})
    with torch.inference_mode():
        if args.mode == "prefill":
            for n in (512, 2048):
                ids = torch.randint(0, vocab, (1, n), device="cuda")
                res[f"pp{n}_tok_s"] = n / timed(lambda: model(ids, use_cache=False))
        else:
            prompt = torch.randint(0, vocab, (1, 16), device="cuda")
            kw = dict(max_new_tokens=args.gen, min_new_tokens=args.gen, do_sample=False)
            if args.mode in ("static", "compile"):
                kw["cache_implementation"] = "static"
            if args.mode == "compile":
                model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=False)
            res[f"tg{args.gen}_{args.mode}_tok_s"] = args.gen / timed(lambda: model.generate(prompt, **kw), reps=2)
    json.dump(res, open(args.out, "w"), indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
