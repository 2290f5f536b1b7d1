#!/usr/bin/env python3
"""Builds a small synthetic Kimi-style tiktoken tokenizer and reference encodings made by the `tiktoken` package.

Real Moonshot checkpoints (Kimi K2, Kimi Linear, Kimi K3) ship `tiktoken.model` + `tokenizer_config.json` and a
`tokenization_kimi.py` that wraps `tiktoken.Encoding` with Kimi's pre-tokenizer pattern. The real rank table cannot
be downloaded here, so this script trains a byte-level BPE on a multi-script corpus and writes:

  tests/data/tokenizer/tiktoken_kimi/tiktoken.model         "<base64 bytes> <rank>" per line, ranks 0..n-1
  tests/data/tokenizer/tiktoken_kimi/tokenizer_config.json  Kimi's layout: added_tokens_decoder for the 258 ids after
                                                            the ranks (some left unnamed), bos/eos/pad/unk, chat
                                                            template
  tests/data/tokenizer/tiktoken_kimi/cases.json             per text: ids and decode (the oracle: tiktoken, through
                                                            the Kimi tokenizer's encode(): 400k-character chunks,
                                                            then runs of more than 25,000 whitespace / non-whitespace
                                                            characters cut, each part encoded with allowed_special
                                                            "all"); decode cases for id lists that split characters

The rank table is perturbed so that tiktoken's rules matter: single bytes at shuffled ranks, blocks of merged tokens
with their ranks reversed (a token ranked before the tokens it is made of), and whole-piece tokens that no merge
can reach, and tokens across the piece boundaries of Kimi's pattern (so a misplaced boundary changes ids).
Deterministic (fixed seeds); the tiktoken version is recorded in cases.json.

Usage: python3 tools/gen_tiktoken_cases.py   (from the repository root; needs `pip install tiktoken regex`)
"""
import base64
import collections
import json
import os
import random

import regex
import tiktoken

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "data", "tokenizer", "tiktoken_kimi")

# Kimi's pat_str (tokenization_kimi.py), as the reference joins it.
KIMI_PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
NUM_RESERVED = 256  # the reference names num_base .. num_base + 256 + 1 (258 ids)
MAX_ENCODE_CHARS = 400_000
MAX_RUN_CHARS = 25_000
N_MERGES = 3000

CORPUS = """
The quick brown fox jumps over the lazy dog. It's a beautiful day; isn't it? We'll see, they've said, I'm sure.
I'M SHOUTING, YOU'RE WHISPERING, THEY'LL LISTEN. Don't, won't, can't, shouldn't, wouldn't, I'd, you'd, we'd.
Penstock serves mixture-of-experts language models: prefill first, then decode. Chunked prefill keeps GPUs busy.
In 2024, 1234567 tokens were processed at 98.6% utilisation, costing $12,345.67 (approx. 11,000 EUR).
def forward(self, x: torch.Tensor) -> torch.Tensor:
    return self.norm(x + self.attn(x))  # residual connection
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
{"model": "kimi-k2", "max_tokens": 128, "stream": true, "messages": [{"role": "user", "content": "hi"}]}
SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name ORDER BY 2 DESC;
机器学习是人工智能的一个分支。深度学习使用多层神经网络。我们今天学习分词器和语言模型。
中华人民共和国成立于一九四九年。北京是中国的首都，上海是最大的城市。你好，世界！
月之暗面发布了新的大模型，支持长上下文和工具调用。请问今天天气怎么样？我很好，谢谢。
日本語のテキストも含まれています。ひらがなとカタカナと漢字。トークナイザーのテストです。
한국어 문장도 있습니다. 안녕하세요, 세계! 토크나이저를 시험합니다.
Здравствуй, мир! Привет, как дела? Это тестовый текст на русском языке. Москва, Санкт-Петербург.
Γειά σου κόσμε! Αυτό είναι ελληνικό κείμενο. Αθήνα, Θεσσαλονίκη, φιλοσοφία, ΑΛΦΑ ΒΗΤΑ.
مرحبا بالعالم! هذا نص تجريبي باللغة العربية.
नमस्ते दुनिया! यह हिंदी में एक परीक्षण वाक्य है।
Ünïcödé àccents: café, naïve, résumé, Straße, façade, jalapeño, smörgåsbord, Ærøskøbing, Łódź, İstanbul.
Emoji: 😀 🎉 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ ✨ 🚀 🤖🤖🤖 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛
Tabs\tand\tnewlines\nmixed   with    spaces  and trailing spaces   \r\nwindows line\r\n\r\n\n\n
<html><body><p class="x">Hello &amp; goodbye</p></body></html>
x = [1, 2, 3]; y = {k: v for k, v in zip(a, b)}; print(f"{x!r} {y:>10}")
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 10000 3.14159 2.71828 -42 +7 1e-6 0xDEADBEEF 20240101 555-1234
"""


def corpus_lines():
    lines = [l for l in CORPUS.split("\n") if l]
    rng = random.Random(11)
    out = list(lines)
    # Pseudo-words (Latin, Cyrillic, Greek syllables; Han and kana runs) so that a few thousand merges exist.
    syllables = [["ka", "to", "ri", "en", "ser", "ve", "lo", "tion", "ing", "pre", "fill", "de", "code", "mo", "st"],
                 ["ко", "ра", "ни", "ст", "во", "про", "ть", "ся", "ми", "ла"],
                 ["κα", "το", "ρι", "στ", "νο", "λο", "ση", "μα"]]
    han = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后"
    kana = "あいうえおかきくけこさしすせそたちつてとなにぬねのカキクケコサシスセソ"
    for _ in range(900):
        kind = rng.randrange(5)
        if kind < 3:
            words = ["".join(rng.choice(syllables[kind]) for _ in range(rng.randint(1, 4))) for _ in range(6)]
            words = [w.capitalize() if rng.random() < 0.2 else w for w in words]
            out.append(" ".join(words))
        elif kind == 3:
            out.append("".join(rng.choice(han) for _ in range(rng.randint(2, 12))) + "。")
        else:
            out.append("".join(rng.choice(kana) for _ in range(rng.randint(2, 8))) + " " + str(rng.randint(0, 99999)))
    for _ in range(400):  # recombinations so that word frequencies vary
        a, b = rng.sample(lines, 2)
        wa, wb = a.split(" "), b.split(" ")
        out.append(" ".join(wa[: rng.randint(1, len(wa))] + wb[rng.randint(0, len(wb) - 1):]))
    return out


def train_merges(lines, n_merges):
    """Byte-level BPE: the most frequent adjacent pair (ties: smallest bytes) merged n_merges times."""
    split = regex.compile(r"\p{Han}+| ?\p{L}+| ?\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+")
    words = collections.Counter()
    for line in lines:
        for w in split.findall(line):
            words[tuple(bytes([b]) for b in w.encode())] += 1
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merged = best[0] + best[1]
        if merged not in merges:
            merges.append(merged)
        new_words = collections.Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += c
        words = new_words
    return merges


def build_ranks():
    rng = random.Random(5)
    single = [bytes([b]) for b in range(256)]
    rng.shuffle(single)
    merged = train_merges(corpus_lines(), N_MERGES)
    # Reverse every fourth block of 40: tokens ranked before the tokens they are made of.
    for start in range(0, len(merged), 160):
        merged[start:start + 40] = merged[start:start + 40][::-1]
    tokens = single + merged
    known = set(tokens)
    # Whole-piece tokens no merge reaches (no split into two known tokens): used only when a piece equals them.
    extras = []
    for w in ["Penstock", " tokenizer", "中华人民共和国", " Привет", "🤖🤖", "   \n", "Kimi", "'re", " Straße",
              "월요일", "ΑΛΦΑ", " 123", "\r\n\r\n"]:
        b = w.encode()
        if b in known:
            continue
        if any(b[:k] in known and b[k:] in known for k in range(1, len(b))):
            continue
        extras.append(b)
        known.add(b)
    for b in extras:
        tokens.insert(rng.randint(256, len(tokens)), b)
    # Tokens across the boundaries Kimi's pattern draws (Han / CJK punctuation, Latin / Han), reachable by merges and
    # ranked early: a piece boundary misplaced by a regex translation changes the ids. (\p{Han} is the Script
    # property in tiktoken's regex; Script_Extensions would put U+3001 and U+3002 into Han runs.)
    for w in ["好，", "的。", "是！", "我，", "i是", "i大", "。我"]:
        b = w.encode()
        if b in known:
            continue
        if not any(b[:k] in known and b[k:] in known for k in range(1, len(b))):
            print("not reachable, left out:", w)
            continue
        tokens.insert(256 + rng.randint(0, 40), b)
        known.add(b)
    return {t: i for i, t in enumerate(tokens)}, extras


SPECIAL_NAMES = {  # offset from num_base -> name (Kimi K2's layout); other offsets stay unnamed
    0: ("[BOS]", True), 1: ("[EOS]", True), 2: ("<|im_end|>", True), 3: ("<|im_user|>", True),
    4: ("<|im_assistant|>", True), 6: ("<|start_header_id|>", True), 7: ("<|end_header_id|>", True),
    9: ("[EOT]", True), 10: ("<|im_system|>", True), 11: ("<|tool_calls_section_begin|>", False),
    12: ("<|tool_calls_section_end|>", False), 13: ("<|tool_call_begin|>", False),
    14: ("<|tool_call_argument_begin|>", False), 15: ("<|tool_call_end|>", False), 17: ("<|im_middle|>", True),
    254: ("[UNK]", True), 255: ("[PAD]", True),
}

CHAT_TEMPLATE = ("{%- for message in messages -%}"
                 "{{ '<|im_' + message['role'] + '|>' + message['role'] + '<|im_middle|>' + message['content'] "
                 "+ '<|im_end|>' }}"
                 "{%- endfor -%}"
                 "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}")


def special_tokens(num_base, names):
    return {names.get(i, (f"<|reserved_token_{i}|>", False))[0]: i
            for i in range(num_base, num_base + NUM_RESERVED + 2)}


def kimi_encode(enc, text):
    """The Kimi tokenizer's encode(text): chunks of 400k characters, each cut inside whitespace / non-whitespace runs
    longer than 25,000 characters (str.isspace), each part encoded by tiktoken with every special token allowed."""
    ids = []
    for c in range(0, len(text), MAX_ENCODE_CHARS):
        chunk = text[c:c + MAX_ENCODE_CHARS]
        run, is_space, start = 0, chunk[0].isspace() if chunk else False, 0
        parts = []
        for i, ch in enumerate(chunk):
            now = ch.isspace()
            if now != is_space:
                run, is_space = 1, now
            else:
                run += 1
                if run > MAX_RUN_CHARS:
                    parts.append(chunk[start:i])
                    start, run = i, 1
        parts.append(chunk[start:])
        for p in parts:
            ids.extend(enc.encode(p, allowed_special="all"))
    return ids


def fuzz_texts(n, seed):
    """Random strings over code points assigned in Python's Unicode database (14.0, like PCRE2 10.42's tables)."""
    import unicodedata
    rng = random.Random(seed)
    pools = [
        (0x20, 0x7F), (0xA0, 0x250), (0x370, 0x400), (0x400, 0x530), (0x591, 0x700), (0x900, 0x980),
        (0x1100, 0x1200), (0x2000, 0x2070), (0x3000, 0x3100), (0x4E00, 0x9FFF), (0xAC00, 0xAD00),
        (0xFF00, 0xFFF0), (0x1F300, 0x1FAFF), (0x1D400, 0x1D800), (0x20000, 0x2A6DF),
    ]
    texts = []
    for _ in range(n):
        out = []
        for _ in range(rng.randint(1, 40)):
            r = rng.random()
            if r < 0.15:
                out.append(rng.choice([" ", "  ", "\n", "\r\n", "\t", " \n ", "'s", "'LL", "1234", "\u3000"]))
                continue
            lo, hi = rng.choice(pools)
            cp = rng.randrange(lo, hi)
            if unicodedata.category(chr(cp)) in ("Cn", "Cs", "Co"):
                continue
            out.append(chr(cp))
        texts.append("".join(out))
    return texts


TEXTS = [
    "", " ", "a", "A", "Hello", "Hello world", "hello, world!", "  leading spaces", "trailing spaces   ",
    "I'M here", "you're right", "You'RE", "they'll", "we've", "she'd", "it's", "IT'S", "don't", "DON'T",
    "O'Neil's cat", "rock'n'roll", "'s", "'", "''", "x'y", "I'ſ", "Penstock", "Penstock!", " tokenizer",
    "tokenizer", "Kimi", "Kimi's", "CamelCaseWords", "HTTPServerError", "iPhone", "ABCdef", "ǅungla", "ᾈᾉ test",
    "1", "12", "123", "1234", "12345678901", "3.14159", "-42", "v1.2.3", "2024-01-01T00:00:00Z", " 123",
    "١٢٣٤٥", "①②③", "ⅠⅡⅢⅣ", "x²+y³",
    "中文", "中华人民共和国", "中华人民共和国成立", "我爱北京天安门。", "你好，世界！", "月之暗面Kimi大模型",
    "Kimi是一个AI助手", "混合mixed中English文本", "你好，我是Kimi。", "目的。是！我，好", "kimi大模型", "。我", "数字123和汉字", "、。「」", "々〇⺀", "中\n文", "中 文",
    "日本語のテキスト", "ひらがな カタカナ", "한국어 문장", "월요일", "Привет, мир!", " Привет", "ЗДРАВСТВУЙ мир",
    "Γειά σου κόσμε", "ΑΛΦΑ", "αβγ ΔΕΖ", "مرحبا بالعالم", "नमस्ते दुनिया", "café naïve", "e\u0301\u0301", " Straße",
    "Łódź İstanbul", "😀", "😀😀😀", "🤖🤖", "🤖🤖🤖", "👍🏽", "👨‍👩‍👧", "🇫🇷🇩🇪", "❤️", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟙𝟚𝟛",
    "𠀀𠀁 ext B", "emoji😀inside", "\t", "\ttab\tseparated\t", "line1\nline2", "line1\r\nline2\r\n",
    "a\n\nb", "a\n\n\n\nb", "\n", "\n\n", "\r\n\r\n", "   \n", "  \n  \n", "x   \n   y", "end \n", "a \t b",
    "\u00a0nbsp", "\u3000ideographic space", "\u2028\u2029", "\x1c\x1d\x1e\x1f",
    "def f(x):\n    return x + 1\n", "for (int i = 0; i < n; ++i) { s += a[i]; }", "<html><p>Hi</p></html>",
    '{"key": "value", "n": 12345}', "$12,345.67", "100%", "a+b=c", "...", "!!!???", "---", "@user #tag",
    "[BOS]", "[BOS]Hello[EOS]", "<|im_user|>user<|im_middle|>Hi<|im_end|>", "text<|im_end|>more",
    "<|im_end|><|im_end|>", "<|im_end", "<|im_end|", "im_end|>", "[EOS] [EOS]", " [EOS]", "<|reserved_token_%d|>",
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get:0<|tool_call_argument_begin|>{}"
    "<|tool_call_end|><|tool_calls_section_end|>",
    "The quick brown fox jumps over the lazy dog. It's a beautiful day; isn't it?",
    "机器学习是人工智能的一个分支。深度学习使用多层神经网络。",
]


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    ranks, extras = build_ranks()
    num_base = len(ranks)
    with open(os.path.join(OUT_DIR, "tiktoken.model"), "w") as f:
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(tok).decode() + " " + str(rank) + "\n")
    names = {num_base + off: v for off, v in SPECIAL_NAMES.items()}
    specials = special_tokens(num_base, names)
    config = {
        "added_tokens_decoder": {
            str(i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                     "special": special}
            for i, (name, special) in sorted(names.items())
        },
        "additional_special_tokens": ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                                      "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "[EOS]",
        "model_max_length": 1048576,
        "pad_token": "[PAD]",
        "tokenizer_class": "TikTokenTokenizer",
        "unk_token": "[UNK]",
    }
    with open(os.path.join(OUT_DIR, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")

    enc = tiktoken.Encoding(name="tiktoken.model", pat_str=KIMI_PAT, mergeable_ranks=ranks,
                            special_tokens=specials)
    texts = [t.replace("%d", str(num_base + 100)) for t in TEXTS]
    texts += fuzz_texts(70, seed=1234)
    # Runs longer than 25,000 characters: the cut changes the ids (checked below).
    long_texts = ["ser" * 8334 + "a", " " * (MAX_RUN_CHARS + 2) + "y", "1" * (MAX_RUN_CHARS + 3)]
    cases = []
    for t in texts + long_texts:
        ids = kimi_encode(enc, t)
        decoded = enc.decode(ids)
        assert decoded == t, (t, decoded)
        if t in long_texts:
            assert ids != enc.encode(t, allowed_special="all"), "a long case the run cut does not change"
        cases.append({"text": t, "ids": ids})
    # Decode cases: id lists that cut characters (incomplete and invalid UTF-8 become U+FFFD, Python "replace").
    rng = random.Random(99)
    byte_ids = {tok[0]: rank for tok, rank in ranks.items() if len(tok) == 1}
    decode_cases = []
    for raw in [b"\xe4\xb8", b"\xe4\xb8\xad", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80\xf0", b"\x80\x80", b"\xc3(",
                b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a\xffb", b"\xc0\xaf"]:
        ids = [byte_ids[b] for b in raw]
        decode_cases.append({"ids": ids, "text": enc.decode(ids)})
    for _ in range(30):
        ids = [rng.randrange(0, num_base) for _ in range(rng.randint(1, 12))]
        decode_cases.append({"ids": ids, "text": enc.decode(ids)})
    with open(os.path.join(OUT_DIR, "cases.json"), "w") as f:
        # One case per line (reviewable diffs), compact within a line.
        head = {"tiktoken_version": tiktoken.__version__, "num_base": num_base, "n_vocab": enc.n_vocab,
                "pat_str": KIMI_PAT, "whole_piece_tokens": [ranks[b] for b in extras]}
        f.write(json.dumps(head, ensure_ascii=False)[:-1])
        for key, items in (("cases", cases), ("decode_cases", decode_cases)):
            f.write(f',\n"{key}": [\n')
            f.write(",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in items))
            f.write("\n]")
        f.write("}\n")
    print(f"{num_base} ranks ({len(extras)} whole-piece), {len(cases)} cases, {len(decode_cases)} decode cases")


if __name__ == "__main__":
    main()
