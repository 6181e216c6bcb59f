"""zinf's GPT-2 BPE against GPT-2's encoder, byte for byte.

The test builds its own vocabulary (byte-level BPE learned from a text, written as vocab.json +
merges.txt and as a tokenizer.json: nothing is downloaded), encodes a test corpus with a reference
written after GPT-2's encoder.py (its pre-tokenizer pattern run by the `regex` module, its
byte-to-unicode map, its merge loop), and requires `zinf tokenize` to write exactly those ids, in an
llm.c token file, from either vocabulary layout.

    ZINF_BINARY=build/zinf /usr/bin/python3 tests/bpe_gpt2_test.py
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
from collections import Counter

import regex

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_bytes import byte_char_table  # noqa: E402

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

BYTE_CHAR = byte_char_table()


def pieces(text):
    return ["".join(BYTE_CHAR[b] for b in p.encode("utf-8")) for p in PATTERN.findall(text)]


def learn(text, merges_wanted):
    """Byte-level BPE merges learned from `text`: the most frequent adjacent pair, merged in turn."""
    words = Counter(tuple(p) for p in pieces(text))
    merges = []
    for _ in range(merges_wanted):
        pairs = Counter()
        for word, n in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        merged = {}
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    vocab = {BYTE_CHAR[b]: i for i, b in enumerate(range(256))}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


class Gpt2Encoder:
    """GPT-2's encoder.py algorithm: split, map bytes, merge the lowest-ranked pair until none is left."""

    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.ranks = {m: i for i, m in enumerate(merges)}

    def bpe(self, token):
        word = tuple(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            first, second = best
            out, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    out.extend(word[i:])
                    break
                out.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    out.append(first + second)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = tuple(out)
        return word

    def encode(self, text):
        return [self.vocab[t] for piece in pieces(text) for t in self.bpe(piece)]


TRICKY = ("Don't stop: it's 3.14159, isn't it? They'll say we'd've... 'quoted' ''twice'' 'S 'T\n"
          "  two spaces, then\ttab\t\tand  trailing   \n\n\nnewlines\r\nCRLF   \n"
          "Caf\u00e9 na\u00efve \u00fcber \u00c5ngstr\u00f6m \u0394\u03b5\u03bb\u03c4\u03b1 \u041f\u0440\u0438\u0432\u0435\u0442 "
          "\u4e2d\u6587\u5b57 \u65e5\u672c\u8a9e\u3067\u3059 \U0001F600\U0001F680 \u00bd \u2162 \u0661\u0662\u0663 x\u00b2\n"
          "emails a.b@c.de, urls https://x.y/z?q=1&r=2#f, code f(x)=x**2;  // done!!!\u00a0nbsp\u3000ideographic\n"
          "numbers 1234567890 12,345.67 -42 +7e10 0x1F $100 \u20ac5 50% #1 @home\n"
          "   leading spaces and a final space ")


def run(zinf, *args):
    r = subprocess.run([zinf, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"zinf {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def read_bin(path):
    data = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", data[:12])
    assert (magic, version) == (20240520, 1), (magic, version)
    assert len(data) == 1024 + 2 * count, "header count disagrees with the file size"
    return list(struct.unpack(f"<{count}H", data[1024:]))


def main():
    zinf = os.environ.get("ZINF_BINARY", "build/zinf")
    source = os.environ.get("ZINF_SOURCE_DIR", ".")
    with open(os.path.join(source, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    training = readme[:60000] + TRICKY
    vocab, merges = learn(training, 400)
    ref = Gpt2Encoder(vocab, merges)
    corpus = readme[:20000] + "\n" + TRICKY
    want = [vocab["<|endoftext|>"]] + ref.encode(corpus)
    assert len(want) < len(corpus.encode("utf-8")) * 0.6, "the learned merges should compress the text"
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(os.path.join(tmp, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        hf = os.path.join(tmp, "hf")
        os.mkdir(hf)
        with open(os.path.join(hf, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump({"model": {"type": "BPE", "vocab": vocab, "merges": [[a, b] for a, b in merges]}}, f)
        text = os.path.join(tmp, "corpus.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write(corpus)
        for layout in (tmp, hf, os.path.join(hf, "tokenizer.json")):
            out = os.path.join(tmp, "corpus.bin")
            run(zinf, "tokenize", "--tokenizer", layout, "-o", out, text)
            got = read_bin(out)
            if got != want:
                first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
                sys.exit(f"{layout}: ids differ from GPT-2's encoder at token {first} of {len(want)} "
                         f"(zinf {got[first:first + 8]}, GPT-2 {want[first:first + 8]})")
    print(f"ok: {len(want)} tokens identical to GPT-2's encoder ({len(merges)} merges learned here), "
          f"from vocab.json + merges.txt and from tokenizer.json")


if __name__ == "__main__":
    main()
