#!/usr/bin/env python3
"""A deterministic trace of multi-turn chats that share system prompts (the replicas benchmark's load).

Conversation c picks one of `systems` system prompts (Zipf-like: a few prompts are popular, as
the tool and persona prompts of one product are) and runs `turns` user turns; turn k's request
is the whole history: [system, user 1, assistant 1, ..., user k]. The assistant turns are scripted
(written here, not the model's answers), so every policy of a benchmark sends byte-identical
prompts whatever the replicas generate, and a conversation's next prompt extends its previous
one exactly as a client replaying a recorded chat would.

Same arguments, same seed: the same trace, byte for byte (random.Random, no global state).

    python3 tools/bench/chat_trace.py [--conversations 200] [--systems 8] [--turns 3-8] ... --summary
"""
import argparse
import random

# Common English words the repository's test tokenizer (tests/data/tokenizer, from
# tools/tokenizer/corpus.txt) splits into one or two tokens each: about 1.5 tokens per word
# including its space, so word counts translate into predictable token counts.
WORDS = """the of and to in is you that it he was for on are as with his they at be this have from or one
had by word but not what all were we when your can said there use an each which she do how their if will
up other about out many then them these so some her would make like him into time has look two more write
go see number no way could people my than first water been call who its now find long down day did get come
made may part model token engine file memory cache block request server reply answer question prompt text
weather report number value state little steady morning pace fan answer language piece whole fragment letter
byte character boundary integer quality drop notice debug small difference compound missing space split
test careful every script think thank later spend afternoon chase ghost happen classic mistake going away
sunny cloud high degree weekend plan train station ticket price city river bridge garden kitchen window""".split()


def parse_range(text, name):
    """'5' → (5, 5); '3-8' → (3, 8)."""
    lo, _, hi = str(text).partition("-")
    try:
        a, b = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: expected N or LO-HI, got {text!r}")
    if a < 1 or b < a:
        raise argparse.ArgumentTypeError(f"{name}: need 1 <= LO <= HI, got {text!r}")
    return a, b


def _sentence_words(rng, n):
    """n words as sentences of 6-14 words, capitalised and full-stopped."""
    out = []
    while len(out) < n:
        k = min(n - len(out), rng.randint(6, 14))
        s = [rng.choice(WORDS) for _ in range(k)]
        s[0] = s[0].capitalize()
        s[-1] += "."
        out.extend(s)
    return " ".join(out)


def make_trace(conversations=200, systems=8, turns=(3, 8), system_words=(250, 350), user_words=(15, 30),
               reply_words=(15, 30), zipf=1.0, seed=1):
    """Returns {"systems": [str], "conversations": [{"id", "system", "turns": [(user, reply)]}]}.

    The system prompt of each conversation is drawn with weight 1/(rank+1)^zipf (0: uniform)."""
    rng = random.Random(seed)
    sys_prompts = []
    for s in range(systems):
        body = _sentence_words(rng, rng.randint(*system_words))
        # A distinct first line, so no two system prompts share even their first block.
        sys_prompts.append(f"You are assistant number {s} of the trace. {body}")
    weights = [1.0 / (r + 1) ** zipf for r in range(systems)]
    convs = []
    for c in range(conversations):
        sys_idx = rng.choices(range(systems), weights=weights)[0]
        n = rng.randint(*turns)
        tt = []
        for k in range(n):
            user = f"Conversation {c}, question {k + 1}: " + _sentence_words(rng, rng.randint(*user_words))
            reply = _sentence_words(rng, rng.randint(*reply_words))
            tt.append((user, reply))
        convs.append({"id": c, "system": sys_idx, "turns": tt})
    return {"systems": sys_prompts, "conversations": convs}


def messages(trace, conv, k):
    """The chat messages of conversation `conv`'s turn k (0-based): the whole history."""
    msgs = [{"role": "system", "content": trace["systems"][conv["system"]]}]
    for user, reply in conv["turns"][:k]:
        msgs.append({"role": "user", "content": user})
        msgs.append({"role": "assistant", "content": reply})
    msgs.append({"role": "user", "content": conv["turns"][k][0]})
    return msgs


def add_trace_args(ap):
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--systems", type=int, default=8, help="distinct system prompts")
    ap.add_argument("--turns", type=lambda t: parse_range(t, "--turns"), default=(3, 8), help="N or LO-HI")
    ap.add_argument("--system-words", type=lambda t: parse_range(t, "--system-words"), default=(250, 350))
    ap.add_argument("--user-words", type=lambda t: parse_range(t, "--user-words"), default=(15, 30))
    ap.add_argument("--reply-words", type=lambda t: parse_range(t, "--reply-words"), default=(15, 30))
    ap.add_argument("--zipf", type=float, default=1.0, help="popularity skew of the system prompts (0: uniform)")
    ap.add_argument("--seed", type=int, default=1)


def trace_from_args(a):
    if a.conversations < 1 or a.systems < 1:
        raise SystemExit("chat_trace: --conversations and --systems must be at least 1")
    return make_trace(a.conversations, a.systems, a.turns, a.system_words, a.user_words, a.reply_words, a.zipf,
                      a.seed)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trace_args(ap)
    args = ap.parse_args()
    t = trace_from_args(args)
    n_req = sum(len(c["turns"]) for c in t["conversations"])
    words = sum(len(" ".join(m["content"] for m in messages(t, c, k)).split())
                for c in t["conversations"] for k in range(len(c["turns"])))
    print(f"{len(t['conversations'])} conversations, {len(t['systems'])} system prompts, {n_req} requests, "
          f"{words} prompt words in all")
