#!/usr/bin/env python3
"""Writes tests/data/hf/lfm2_d_fullattnidxs_tied_bf16/reference_bf16_run.json: Hugging Face transformers' own
*bfloat16* run of the BF16 fixture, beside its float32 run (reference.json), so lfm's precision modes can be measured
against both (tests/precision_policy_test.cpp, README "Precision").

    /usr/bin/python3 tools/precision_reference/make_bf16_run.py [--fixture tests/data/hf/lfm2_d_fullattnidxs_tied_bf16]
        [--hf-ref ../shared/tools/hf_reference]

- transformers v5.2.0, unmodified, through ../shared/tools/hf_reference (hfenv; build its tree with setup_env.sh,
  default $TMPDIR/hfref, or set HF_REF_ROOT). Debian's /usr/bin/python3 with torch 1.13.1. Nothing from transformers
  is stored in this repository.
- The checkpoint is loaded as transformers runs a bf16 checkpoint: from_pretrained(dtype=torch.bfloat16) (its
  config says torch_dtype bfloat16), eager attention, CPU, one thread, seed 0. Everything the model computes in
  bf16 is then bf16 (matmul outputs, residual stream, K/V cache, conv state); transformers' own upcasts stay
  (RMSNorm's statistics, RoPE's cos/sin, the attention softmax run in float32 and rounded back to bf16).
- Recorded: the full-forward logits of reference.json's `full_forward.input_ids` and the greedy tokens of its three
  `greedy.runs` prompts (32 new tokens, EOS disabled), with each step's top-1/top-2 margin.
- Check first: the same script loads the checkpoint in float32 and must reproduce reference.json's full-forward
  logits bit for bit and its greedy tokens exactly (so the environment is the one that made reference.json).
  Deterministic: two runs give identical files.
"""
import argparse
import hashlib
import json
import os
import platform
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

ap = argparse.ArgumentParser()
ap.add_argument("--fixture", default=os.path.join(REPO, "tests", "data", "hf", "lfm2_d_fullattnidxs_tied_bf16"))
ap.add_argument("--hf-ref", default=os.path.join(REPO, "..", "shared", "tools", "hf_reference"))
ARGS = ap.parse_args()
if not os.path.isdir(ARGS.hf_ref) and os.path.isdir("/work/shared/tools/hf_reference"):  # a git worktree elsewhere
    ARGS.hf_ref = "/work/shared/tools/hf_reference"

sys.path.insert(0, os.path.abspath(ARGS.hf_ref))
import hfenv  # noqa: E402

hfenv.setup("5.2.0")
import torch  # noqa: E402
import transformers  # noqa: E402

torch.set_num_threads(1)
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

TF_COMMIT = "7d9754a05193eb79b1d86aa744b622b8068008cd"  # v5.2.0
MAX_NEW = 32


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load(dtype):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(ARGS.fixture, dtype=dtype, attn_implementation="eager")
    model.eval()
    for p in model.parameters():
        assert p.dtype == dtype, (p.dtype, dtype)
    return model


def margin(row):
    top2 = torch.topk(row.float(), 2).values
    return float(top2[0] - top2[1])


@torch.no_grad()
def full_forward(model, ids):
    logits = model(torch.tensor([ids])).logits[0]  # [tokens, vocab] in the model's dtype
    return logits


@torch.no_grad()
def greedy(model, prompt):
    """generate(do_sample=False) with EOS disabled: always MAX_NEW tokens; the logits that chose each one."""
    # EOS off in the model's own generation config as well: a None in the call's config counts as "unset" and
    # would fall back to the checkpoint's eos_token_id 2.
    model.generation_config.eos_token_id = None
    gen_cfg = transformers.GenerationConfig(do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=None, pad_token_id=0,
                                            bos_token_id=1)
    out = model.generate(torch.tensor([prompt]), generation_config=gen_cfg, return_dict_in_generate=True,
                         output_logits=True)
    tokens = out.sequences[0, len(prompt):].tolist()
    assert len(tokens) == MAX_NEW, len(tokens)
    steps = [lg[0] for lg in out.logits]
    for t, lg in zip(tokens, steps):
        assert int(torch.argmax(lg)) == t
    return tokens, steps


def main():
    ref_path = os.path.join(ARGS.fixture, "reference.json")
    with open(ref_path) as f:
        ref = json.load(f)
    assert ref["fixture"] == "lfm2_d_fullattnidxs_tied_bf16", ref["fixture"]
    for name, digest in ref["files_sha256"].items():  # the very checkpoint reference.json was made from
        assert sha256(os.path.join(ARGS.fixture, name)) == digest, name
    ids = ref["full_forward"]["input_ids"]
    prompts = [run["prompt"] for run in ref["greedy"]["runs"]]

    # 1. The float32 run must reproduce reference.json (same code, same environment).
    f32 = load(torch.float32)
    got = full_forward(f32, ids)
    want = torch.tensor(ref["full_forward"]["logits"], dtype=torch.float32)
    f32_diff = float((got - want).abs().max())
    assert f32_diff == 0.0, f"float32 run differs from reference.json by {f32_diff}"
    for run in ref["greedy"]["runs"]:
        assert greedy(f32, run["prompt"])[0] == run["new_tokens"], run["prompt"]
    del f32

    # 2. The bfloat16 run, as transformers runs this checkpoint by default.
    bf = load(torch.bfloat16)
    logits = full_forward(bf, ids)
    assert logits.dtype == torch.bfloat16, logits.dtype
    lf = logits.float()  # exact: every bf16 value is a float32 value
    runs = []
    for prompt in prompts:
        tokens, steps = greedy(bf, prompt)
        runs.append({"prompt": prompt, "new_tokens": tokens,
                     "step_margins": [round(margin(s), 6) for s in steps],
                     "min_top1_top2_margin": min(margin(s) for s in steps)})
    f32_logits = want
    out = {
        "fixture": ref["fixture"],
        "notes": ("transformers' bfloat16 run of this BF16 checkpoint: from_pretrained(dtype=torch.bfloat16), the "
                  "way transformers runs a checkpoint whose config says torch_dtype bfloat16. Matmul outputs, the "
                  "residual stream, K/V cache and conv state are bf16; RMSNorm statistics, RoPE cos/sin and the "
                  "attention softmax are float32 inside transformers' code and rounded back to bf16. reference.json "
                  "holds the float32 run of the same bf16 weights. The bf16 results depend on torch's bf16 CPU "
                  "kernels (torch_version below). Logits are exact bf16 values."),
        "meta": {
            "generator": "tools/precision_reference/make_bf16_run.py",
            "transformers_version": transformers.__version__,
            "transformers_commit": TF_COMMIT,
            "huggingface_hub": ref["meta"]["huggingface_hub"],
            "torch_version": torch.__version__,
            "python": platform.python_version(),
            "compute_dtype": "bfloat16",
            "attn_implementation": "eager",
            "torch_num_threads": torch.get_num_threads(),
            "seed": 0,
            "compat_shims": list(hfenv.COMPAT_SHIMS),
            "model_class": type(bf).__name__,
            "files_sha256": ref["files_sha256"],
            "float32_check": "the float32 load of this script reproduces reference.json's full_forward logits bit "
                             "for bit and its greedy tokens exactly",
        },
        "full_forward": {
            "input_ids": ids,
            "logits": [[float(v) for v in row] for row in lf.tolist()],
            "argmax": [int(i) for i in torch.argmax(lf, dim=-1).tolist()],
            "top1_top2_margin": [margin(row) for row in lf],
            "argmax_equal_to_float32_run": [int(a) == int(b) for a, b in
                                            zip(torch.argmax(lf, -1).tolist(), torch.argmax(f32_logits, -1).tolist())],
            "max_abs_diff_vs_float32_run": float((lf - f32_logits).abs().max()),
            "max_abs_logit_float32_run": float(f32_logits.abs().max()),
        },
        "greedy": {
            "max_new_tokens": MAX_NEW,
            "eos_token_id": None,
            "note": "HF generate(do_sample=False), EOS disabled, bf16 throughout; step_margins[k] is top1 - top2 of "
                    "the bf16 logits that chose new_tokens[k] (0 means a tie, broken by the lower id)",
            "runs": runs,
            "new_tokens_equal_to_float32_run": [r["new_tokens"] == g["new_tokens"]
                                                for r, g in zip(runs, ref["greedy"]["runs"])],
        },
    }
    path = os.path.join(ARGS.fixture, "reference_bf16_run.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    ff = out["full_forward"]
    print(f"wrote {path}: max|bf16 - f32| {ff['max_abs_diff_vs_float32_run']:.4g} (max|logit| "
          f"{ff['max_abs_logit_float32_run']:.4g}); argmax equal at {sum(ff['argmax_equal_to_float32_run'])}/"
          f"{len(ids)} positions; greedy runs equal to float32: {out['greedy']['new_tokens_equal_to_float32_run']}")


if __name__ == "__main__":
    main()
