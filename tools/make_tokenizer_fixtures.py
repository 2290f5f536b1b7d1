#!/usr/bin/env python3
"""Trains small byte-level BPE tokenizers with the Hugging Face `tokenizers` package and writes reference encodings.

Outputs (deterministic for a given `tokenizers` version; the version is recorded in each fixture's header line):
  assets/tiny-deepseek-v3/tokenizer.json, tokenizer_config.json   DeepSeek-V3-style tokenizer for the bundled tiny
                                                                  model (vocab 512 = the model's vocab_size)
  tests/data/tokenizer/<name>.tokenizer.json                      the other tokenizers (GPT-2 style with legacy
                                                                  "a b" merges and add_prefix_space; Llama-3 style
                                                                  with (?i:...) contractions and ignore_merges;
                                                                  o200k pattern with possessive/atomic groups and
                                                                  every Split behavior and invert; Qwen-2 style with
                                                                  an NFC normalizer)
  tests/data/tokenizer/<name>.jsonl                               one header line, then per corpus line: text, ids
                                                                  with and without special tokens, decode of the
                                                                  special-token ids with skip_special_tokens false and
                                                                  true (absent when equal), DecodeStream chunks

Usage: /root/venv-fx/bin/python tools/make_tokenizer_fixtures.py   (from the repository root)
"""
import json
import os
import random

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSET_DIR = os.path.join(ROOT, "assets", "tiny-deepseek-v3")
DATA_DIR = os.path.join(ROOT, "tests", "data", "tokenizer")

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"

# DeepSeek-V3's published pre-tokenizer: digits in runs of up to 3, CJK runs, then letters / punctuation / spaces.
DEEPSEEK_DIGITS = r"\p{N}{1,3}"
DEEPSEEK_CJK = r"[一-龥\u3040-ゟ゠-ヿ]+"
DEEPSEEK_MAIN = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
                 r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Llama-3's pattern (contractions case-insensitive, digits in runs of up to 3).
# Qwen-2's pattern (single digits), used with an NFC normalizer.
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
         r"\s+(?!\S)|\s+")
# GPT-4o's o200k pattern: case classes, possessive-free but with optional contractions after letters.
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")

TRAIN_TEXT = """
The quick brown fox jumps over the lazy dog. It's a beautiful day; isn't it? We'll see, they've said, I'm sure.
Penstock serves large language models: prefill first, then decode. Chunked prefill keeps the GPU busy.
In 2024, 1234567 tokens were processed at 98.6% utilisation, costing $12,345.67 (approx. €11,000).
def forward(self, x: torch.Tensor) -> torch.Tensor:
    return self.norm(x + self.attn(x))  # residual connection
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
{"model": "deepseek-v3", "max_tokens": 128, "stream": true, "messages": [{"role": "user"}]}
SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name ORDER BY 2 DESC;
机器学习是人工智能的一个分支。深度学习使用多层神经网络。我们今天学习分词器。
日本語のテキストも含まれています。ひらがなとカタカナと漢字。トークナイザー。
한국어 문장도 있습니다. 안녕하세요, 세계!
Здравствуй, мир! Привет, как дела? Это тестовый текст на русском языке.
مرحبا بالعالم! هذا نص تجريبي باللغة العربية.
שלום עולם, זהו טקסט לדוגמה.
Γειά σου κόσμε! Αυτό είναι ελληνικό κείμενο.
Ünïcödé àccents: café, naïve, résumé, Straße, façade, jalapeño, smörgåsbord.
Emoji: 😀 🎉 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ ✨ 🚀
Tabs\tand\tnewlines\nmixed   with    spaces  and trailing spaces   
<html><body><p class="x">Hello &amp; goodbye</p></body></html>
x = [1, 2, 3]; y = {k: v for k, v in zip(a, b)}; print(f"{x!r} {y:>10}")
The transformer architecture uses attention, feed-forward layers, and normalisation.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 10000 3.14159 2.71828 -42 +7 1e-6 0xDEADBEEF
"""


def train_corpus():
    lines = [l for l in TRAIN_TEXT.split("\n") if l]
    rng = random.Random(7)
    out = []
    for _ in range(40):
        rng.shuffle(lines)
        out.extend(lines)
    return out


def random_text(rng, n):
    # Code points from ASCII, Latin-1, combining marks, Greek, Cyrillic, Hebrew, Arabic, CJK, kana, Hangul,
    # general punctuation, unusual spaces, emoji and variation selectors.
    blocks = [(0x20, 0x7E), (0x09, 0x0D), (0xA0, 0xFF), (0x300, 0x36F), (0x391, 0x3C9), (0x410, 0x44F),
              (0x5D0, 0x5EA), (0x620, 0x64A), (0x4E00, 0x4E80), (0x3040, 0x30FF), (0xAC00, 0xAC40),
              (0x2000, 0x206F), (0x1F600, 0x1F64F), (0xFE00, 0xFE0F), (0x1680, 0x1680), (0x3000, 0x3000),
              (0x85, 0x85), (0x180E, 0x180E), (0x200D, 0x200D)]
    chars = []
    for _ in range(n):
        lo, hi = blocks[rng.randrange(len(blocks))]
        chars.append(chr(rng.randint(lo, hi)))
    return "".join(chars)


def eval_corpus(special_tokens):
    fixed = [
        "", " ", "  ", "\t", "\n", "\r\n", " \n ", "a", "Hello world", " Hello world", "Hello  world",
        "Hello world   ", "trailing\t\t", "\n\n\nthree newlines", "tabs\tin\tthe\tmiddle", "mixed \t \n whitespace",
        "It's I'M we'll THEY'VE you'd she'S", "1", "12", "123", "1234", "12345678901234567890", "3.14159 and 2,718",
        "version 1.2.3-rc4", "机器学习是人工智能的一个分支。", "日本語のテキスト、カタカナ。", "한국어 문장",
        "Здравствуй, мир!", "مرحبا بالعالم", "שלום עולם", "Γειά σου κόσμε", "café naïve Straße",
        "e\u0301 a\u0300 o\u0308\u0304 combining", "Emoji 😀🎉 family 👨‍👩‍👧 flag 🇫🇷 heart ❤️",
        "def f(x):\n    return x**2  # square\n", "if (a[i] != b[j]) { return -1; }", "<div id=\"x\">&nbsp;</div>",
        "url: https://example.com/a?b=c&d=e#f", "email someone@example.org now", "$12,345.67 (€11,000)",
        "\u00a0no-break\u00a0space", "ideographic\u3000space", "ogham\u1680space", "mongolian\u180evs",
        "nel\u0085line", "zero\u200bwidth", "ZWJ\u200djoiner", "   leading spaces", "!!!???...", "'s's's",
        "ALLCAPS and lowercase and MiXeD", "a" * 300,
        # canonical normalization: combining sequences, reordering, singletons, exclusions, Hangul jamo
        "cafe\u0301 cafe\u0301s café", "a\u0323\u0302 a\u0302\u0323 ạ\u0302", "\u212b \u2126 \u0344 \u0f73",
        "\u0958 \u2adc \u1e9b\u0323", "\u1100\u1161\u11a8 \u1100\u1161 \uac00\u11a8", "\u0301start",
        "o\u0308\u0304 u\u0308\u0301 \u1e17 \u0e33", "\u09c7\u09be \u0b47\u0b3e \u1025\u102e", " " * 50 + "x", "9" * 40, "😀" * 20,
    ]
    for tok in special_tokens:
        fixed += [tok, f"Hello{tok}world", f"start {tok} middle {tok}end", f"{tok}{tok}", f"  {tok}  spaced  ",
                  f"text\n{tok}\nnext"]
    rng = random.Random(1234)
    fixed += [random_text(rng, rng.randint(1, 40)) for _ in range(100)]
    fixed += [random_text(rng, rng.randint(100, 300)) for _ in range(6)]
    paragraphs = [l for l in TRAIN_TEXT.split("\n") if l]
    fixed += ["\n".join(rng.sample(paragraphs, 6)) for _ in range(5)]
    rng2 = random.Random(99)
    for _ in range(40):  # random mixes of special tokens and text
        parts = [rng2.choice(special_tokens) if rng2.random() < 0.4 else random_text(rng2, rng2.randint(0, 6))
                 for _ in range(rng2.randint(1, 6))]
        fixed.append("".join(parts))
    return fixed


def train(pre_tokenizer, vocab_size, specials, added, normalizer=None):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(added), special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train_corpus(), trainer=trainer)
    assert tok.get_vocab_size() == vocab_size - len(added), tok.get_vocab_size()
    tok.add_tokens(added)
    assert tok.get_vocab_size() == vocab_size
    return tok


def make_deepseek():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(DEEPSEEK_DIGITS), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(DEEPSEEK_CJK), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(DEEPSEEK_MAIN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    added = [
        AddedToken("<｜User｜>", special=False, normalized=False),
        AddedToken("<｜Assistant｜>", special=False, normalized=False),
        AddedToken("<think>", special=False, normalized=False, lstrip=True, rstrip=True),
        AddedToken("ACME", special=False, normalized=True, single_word=True),
        AddedToken("<|pad|>", special=True, normalized=False),
    ]
    tok = train(pre, 512, [BOS, EOS], added)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, tok.token_to_id(BOS))])
    return tok, [BOS, EOS, "<｜User｜>", "<｜Assistant｜>", "<think>", "ACME", "<|pad|>"]


def make_gpt2():
    pre = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    added = [AddedToken("<|fim|>", special=False, normalized=False, lstrip=False, rstrip=True)]
    tok = train(pre, 400, ["<|endoftext|>"], added)
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    return tok, ["<|endoftext|>", "<|fim|>"]


def make_llama3():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tok = train(pre, 450, specials, [AddedToken("<|python_tag|>", special=True, normalized=False)])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))]),
    ])
    return tok, specials + ["<|python_tag|>"]


def make_qwen():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    # A normalized added token written decomposed: `tokenizers` matches its NFC form in the normalized text.
    added = [AddedToken("cafe\u0301", special=False, normalized=True)]
    tok = train(pre, 440, specials, added, normalizer=normalizers.NFC())
    return tok, specials + ["café"]


def make_o200k_mixed():
    # o200k's pattern with possessive quantifiers (as some tokenizer.json files spell it), then every other split
    # behavior and invert, to pin down the folding rules; ByteLevel with add_prefix_space on the resulting pieces.
    pattern = O200K.replace(r"\s+(?!\S)|\s+", r"\s++$|\s+(?!\S)|\s+").replace(r"[\r\n/]*", r"[\r\n/]*+")
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.Split("-", behavior="merged_with_next", invert=False),
        pre_tokenizers.Split(Regex(r"[.,]"), behavior="merged_with_previous", invert=False),
        pre_tokenizers.Split(Regex(r"[0-9]"), behavior="contiguous", invert=True),
        pre_tokenizers.Split(Regex(r"(?>ab|a)c"), behavior="removed", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False),
    ])
    tok = train(pre, 420, ["<|endoftext|>"], [AddedToken("<|im_start|>", special=True, normalized=False)])
    return tok, ["<|endoftext|>", "<|im_start|>"]


def tokenizer_json(tok, legacy_merges=False, ignore_merges=False):
    d = json.loads(tok.to_str())
    if legacy_merges:
        d["model"]["merges"] = [" ".join(m) for m in d["model"]["merges"]]
    if ignore_merges:
        d["model"]["ignore_merges"] = True
    text = json.dumps(d, ensure_ascii=False, indent=1)
    return Tokenizer.from_str(text), text  # reload so the fixture comes from exactly the saved file


def write_fixture(name, tok, specials):
    lines = [json.dumps({"tokenizers_version": tokenizers.__version__, "name": name})]
    for text in eval_corpus(specials):
        with_sp = tok.encode(text, add_special_tokens=True).ids
        without = tok.encode(text, add_special_tokens=False).ids
        stream = decoders.DecodeStream(skip_special_tokens=False)
        chunks = [stream.step(tok, i) for i in with_sp]
        row = {"text": text, "ids": with_sp, "ids_no_special": without,
               "decoded": tok.decode(with_sp, skip_special_tokens=False),
               "decoded_skip_special": tok.decode(with_sp, skip_special_tokens=True),
               "stream": [c for c in chunks if c is not None]}
        if row["decoded_skip_special"] == row["decoded"]:
            del row["decoded_skip_special"]  # absent: same as "decoded" (keeps the fixtures small)
        lines.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
    with open(os.path.join(DATA_DIR, name + ".jsonl"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines) - 1


def main():
    os.makedirs(DATA_DIR, exist_ok=True)
    ds, ds_specials = make_deepseek()
    ds, ds_text = tokenizer_json(ds)
    with open(os.path.join(ASSET_DIR, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(ds_text)
    config = {
        "add_bos_token": True, "add_eos_token": False, "bos_token": {"content": BOS, "lstrip": False,
        "normalized": False, "rstrip": False, "single_word": False, "__type": "AddedToken"}, "eos_token": EOS,
        "pad_token": "<|pad|>", "model_max_length": 4096, "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "chat_template": ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
                          "{{ '<｜User｜>' + message['content'] }}{% elif message['role'] == 'assistant' %}"
                          "{{ '<｜Assistant｜>' + message['content'] + eos_token }}{% else %}{{ message['content'] }}"
                          "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}"),
    }
    with open(os.path.join(ASSET_DIR, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    n = write_fixture("tiny_deepseek_v3", ds, ds_specials)
    print(f"tiny_deepseek_v3: {n} lines")
    for name, maker, legacy, ignore in [("gpt2_style", make_gpt2, True, False),
                                        ("llama3_style", make_llama3, False, True),
                                        ("o200k_mixed", make_o200k_mixed, False, False),
                                        ("qwen2_nfc", make_qwen, False, False)]:
        tok, specials = maker()
        tok, text = tokenizer_json(tok, legacy_merges=legacy, ignore_merges=ignore)
        with open(os.path.join(DATA_DIR, name + ".tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text)
        n = write_fixture(name, tok, specials)
        print(f"{name}: {n} lines")


if __name__ == "__main__":
    main()
