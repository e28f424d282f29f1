#!/usr/bin/env python3
"""Writes the strings the lfm tokenizer is checked on against tokenizers.js (oracle.mjs).

Deterministic; standard library only. usage: make_test_strings.py OUT_JSON
"""
import json
import sys

HAND_WRITTEN = [
    "", " ", "  ", "\n", "\r\n", "\t", "a", "A", "hello world", "Hello World", "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "the model reads a file and answers questions",
    "Tokenizers split text into pieces; the model only ever sees integers.",
    "Why does this matter? Because small differences compound!",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "IT'S LOUD, ISN'T IT? WE'LL SEE WHAT THEY'VE DONE. SHE'D GO. I'M HERE. YOU'RE LATE.",
    "it's isn't they're we've I'm you'll he'd", "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D",
    "O'Brien's dog's bone", "rock 'n' roll", "''''''```````\"\"\"\"......!!!!!!??????",
    "don't DON'T Don't dOn'T", "'sup", "x'sy", "'ll'll'll",
    "hello    world", "hello\tworld", "hello\nworld", "hello\r\nworld", "hello\n\nworld", "hello \n world",
    "trailing space ", "trailing spaces   ", "  leading spaces", "\n\n\n", "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n",
    "line one\r\nline two\r\n\r\nline four\r\n", "tab\tseparated\tvalues\t1\t2\t3", "\t\tdouble tab indent",
    "    four space indent", "mixed \t \n whitespace \r\n run", "a\u00a0b non-breaking", "ideographic\u3000space",
    "em\u2003space", "line\u2028separator", "zero\u200bwidth", "form\x0cfeed", "vertical\x0btab", "next\u0085line",
    "Call 415-555-0132", "9999", "99999", " 1234", "1000000", "3.14159265358979", "The passkey is 84721.",
    "1,299.99", "$1,299.99 (tax included)", "2024-03-15T08:45:00Z", "v1.2.3", "10.0.0-rc.1", "0x1F 0b1010 1e-9",
    "phone: +1 (415) 555-0132", "٣٤٥ Arabic-Indic digits", "१२३४ Devanagari digits", "①②③ circled", "½ ¾ ⅓ fractions",
    "Ⅻ roman numeral", "x²+y³", "１２３４５ fullwidth digits",
    "https://www.example.org/docs/getting-started?lang=en&page=2#install",
    "http://localhost:8080/api/v1/tokenize", "ftp://files.example.net/pub/readme.txt",
    "mailto:support@example.com", "user.name+tag@sub.example.co.uk", "C:\\Users\\name\\file.txt", "/usr/local/bin/lfm",
    "def f(x):\n    return x ** 2\n", "int main() { return 0; }", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "if (x != y && y <= z || !done) { count += 1; }", "const s = `Hello, ${name}!`;", "#include <vector>\n",
    "SELECT * FROM t WHERE a >= 42;", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "<div class=\"x\">hi</div>",
    "a_b_c __init__ snake_case_name CamelCaseName kebab-case-name", "x=>x*2", "i++; j--; k **= 2;", "#!/bin/bash\necho $HOME",
    "    }\n}\n", "//comment\n/* block */", "-->", "<!-- html comment -->", "\\n\\t\\r escaped", "@decorator\ndef g(): pass",
    "日本語の文章を正しく分割することは難しい。", "東京は日本の首都です。", "我想在apple工作1314151天～", "机器学习是人工智能的一个分支。",
    "한국어 문장도 처리할 수 있어야 합니다.", "مرحبا بالعالم. هذه جملة باللغة العربية.", "नमस्ते दुनिया। यह हिंदी भाषा में एक वाक्य है।",
    "שלום עולם", "สวัสดีครับ ภาษาไทย", "Tiếng Việt có nhiều dấu thanh", "Быстрая коричневая лиса", "Η γρήγορη καφέ αλεπού",
    "Grüße aus München! Die Straße ist nass.", "¿Dónde está la estación? ¡Qué sorpresa!", "Où est la bibliothèque ? À côté.",
    "កាន់តែពិសេសអាច😁", "нещо на Български", "ئۇيغۇرچە", "ქართული ენა", "Հայերեն", "ᚠᚢᚦᚨᚱᚲ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters",
    "🚀", "😀😃😄", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦 family", "🏳️‍🌈", "❤️", "😶‍🌫️ (multiple emojis concatenated)", "✅ 🦙🦙",
    "🇺🇸🇯🇵 flags", "👋🏻👋🏼👋🏽👋🏾👋🏿", "🧑🏽‍🚀 astronaut", "emoji🙂inside🙃words", "⌚⌛ ⏩", "#️⃣ keycap", "©®™",
    "e\u0301 vs \u00e9", "n\u0303", "a\u0310 \u01d2 \u1e69", "Z\u0351\u0308\u0334a\u0310\u0308l\u0327g\u030co\u0361 text",
    "\u0915\u094d\u0937", "\u0627\u064e\u0644\u0652", "combining at start: \u0301x", "\u0301", "e\u0301\u0301\u0301",
    "∑ x² + √y ≤ ∞, α + β = γ", "3 × 4 ÷ 2 ≈ 6", "∀x ∃y: x ≠ y", "“double”, ‘single’, «guillemets», „German“",
    "— dash – en dash … ellipsis", "¡¿", "§ ¶ † ‡ • ‣", "€100 £50 ¥1000 ₹250 ₿0.5",
    "<|startoftext|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|startoftext|><|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is machine learning?<|im_end|>\n<|im_start|>assistant\n",
    "text before<|im_end|>text after", "<|im_end|><|im_end|>", "<|im_end|> spaced <|im_end|>", "<|im_end", "im_end|>",
    "<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|>", "<|tool_list_start|>[]<|tool_list_end|>",
    "<|tool_response_start|>{\"temp\": 21}<|tool_response_end|>", "<|reserved_6|><|reserved_489|><|reserved_490|>",
    "<|fim_pre|>def f(<|fim_suf|>):<|fim_mid|>", "<|cot_start|>thinking<|cot_end|>", "<|file_start|>a.txt<|file_end|>",
    "<|pad|><|pad|>", "<|endoftext|>", "<<|im_end|>>", "<|<|im_end|>|>", "<|unknown_token|>", "<|reserved_999|>",
    "Mathias", "python", "Mathias python", "pythonic", "Pythonic", "PYTHON", "I love python!", "Mathiasson", "xpythonx",
    " python ", "python3", "pythonpython", "Mathias<|im_end|>python", "<|im_start|>python",
    "antidisestablishment", " antidisestablishment", "the antidisestablishment movement", " zyzzyva", " quixotically",
    "xylophone", "Xylophone", " xylophone",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 "
    "កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? "
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "A" * 300, "ab" * 200, " " * 50, "\n" * 20, "!" * 40, "🙂" * 30, "lorem ipsum " * 30,
    "Supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "The committee reviewed the proposal and requested additional information about the budget.",
    "Performance improved from 12.5 tokens per second to 48.3 tokens per second.",
    "Q: What is the capital of France?\nA: Paris.", "Pack a jacket if you are heading to the mountains.",
    "Mix 250 grams of flour, 2 eggs, 500 millilitres of milk and a pinch of salt.",
]


def generated():
    out = []
    # Digit runs of every length from 1 to 24, bare, after a space and inside words.
    for n in range(1, 25):
        digits = "".join(str((i * 7 + 3) % 10) for i in range(n))
        out += [digits, " " + digits, "x" + digits + "y", digits + "." + digits[:3]]
    # Whitespace runs of several kinds and lengths, between and around words.
    for ws in [" ", "\t", "\n", "\r\n", " \n", "\n ", "\t \t", "\u00a0", "\u3000"]:
        for k in (1, 2, 3, 5):
            out += [f"a{ws * k}b", f"{ws * k}end", f"start{ws * k}"]
    # Each contraction suffix in lower, upper and mixed case, attached and detached.
    for suffix in ["s", "t", "re", "ve", "m", "ll", "d"]:
        for form in (suffix, suffix.upper(), suffix.capitalize()):
            out += [f"word'{form}", f"WORD'{form} next", f"' {form}"]
    # Punctuation runs followed by newlines (the " ?[^\s\p{L}\p{N}]+[\r\n]*" branch).
    for p in [".", "!?", "...", ");", "}}", "-->", "*/", "::"]:
        out += [f"x{p}\n", f"x {p}\r\n\r\n", f"{p}{p}"]
    return out


def main():
    strings = HAND_WRITTEN + generated()
    seen, unique = set(), []
    for s in strings:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(unique, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(unique)} strings")


if __name__ == "__main__":
    main()
