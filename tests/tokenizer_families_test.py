"""zinf's tokenizers against the families' own patterns, on generated text.

For each tokenizer.json in tests/data/tokenizers (GPT-2, GPT-NeoX, Llama 3, Qwen2 and Llama 2 as
Hugging Face's tokenizers ships them, with small vocabularies), thousands of random strings made of
the characters that trip splitters (contractions in both cases and the long s, digit runs, CR, LF,
tabs, no-break and ideographic spaces, combining marks, Hangul jamo, letters of several scripts,
emoji, the special tokens themselves) are encoded by zinf (tests/tokenizer/tokenizer_check) and by
a reference written here: the split is the `regex` module running the family's pattern string from
the file, NFC is unicodedata's, and BPE follows `tokenizers`' merge loop (lowest rank, then leftmost;
ignore_merges; byte fallback; fused unknowns). Pieces, ids and the decoded text must agree exactly.
The same holds for variants made from them with the other steps zinf reads (Digits, ByteLevel's
add_prefix_space, Metaspace with prepend_scheme "first", split or not).
Then `zinf tokenize` encodes documents from a folder holding each file, and its token file must
hold the reference's ids with the family's document start (the template's BOS, or <|endoftext|>),
16-bit; with Llama 3's file given an added token past 65535, llm.c's 32-bit token file.

    ZINF_TOKENIZER_CHECK=build/tests/tokenizer_check ZINF_BINARY=build/zinf /usr/bin/python3 tests/tokenizer_families_test.py
"""
import heapq
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_bytes import byte_char_table  # noqa: E402

try:
    import regex
except ImportError:
    print("skipped: the regex module is not installed (scripts/setup.sh installs python3-regex)")
    sys.exit(77)

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


BYTE_CHAR = byte_char_table()


class Reference:
    """A tokenizer.json's encoding as `tokenizers` carries it out, for the shapes the families use."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        self.added = [(t["content"], t["id"], t.get("normalized", False)) for t in j.get("added_tokens") or []]
        self.normalizers = self._flatten(j.get("normalizer"), "normalizers")
        self.steps = self._flatten(j.get("pre_tokenizer"), "pretokenizers")
        self.byte_level = any(s["type"] == "ByteLevel" for s in self.steps)
        m = j["model"]
        self.vocab = m["vocab"]
        self.ignore_merges = m.get("ignore_merges", False)
        self.byte_fallback = m.get("byte_fallback", False)
        self.unk = self.vocab.get(m.get("unk_token")) if m.get("unk_token") else None
        self.fuse_unk = m.get("fuse_unk", False)
        self.merges = {}
        for rank, merge in enumerate(m["merges"]):
            a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
            self.merges[(self.vocab[a], self.vocab[b])] = (rank, self.vocab[a + b])
        pp = self._flatten(j.get("post_processor"), "processors")
        template = [p for p in pp if p["type"] == "TemplateProcessing"]
        if template:
            self.start = [i for piece in template[0]["single"] if "SpecialToken" in piece
                          for i in template[0]["special_tokens"][piece["SpecialToken"]["id"]]["ids"]]
        else:
            self.start = [i for c, i, _ in self.added if c == "<|endoftext|>"]

    @staticmethod
    def _flatten(section, key):
        if section is None:
            return []
        if section["type"] == "Sequence":
            return [s for sub in section[key] for s in Reference._flatten(sub, key)]
        return [section]

    def split_added(self, text, normalized):
        tokens = sorted((a for a in self.added if a[2] == normalized), key=lambda a: -len(a[0]))
        out, start, at = [], 0, 0
        while at < len(text):
            hit = next((a for a in tokens if text.startswith(a[0], at)), None)
            if hit is None:
                at += 1
                continue
            if at > start:
                out.append((text[start:at], None))
            out.append((hit[0], hit[1]))
            at += len(hit[0])
            start = at
        if start < len(text):
            out.append((text[start:], None))
        return out

    def normalize(self, text):
        for n in self.normalizers:
            if n["type"] == "NFC":
                text = unicodedata.normalize("NFC", text)
            elif n["type"] == "Prepend":
                text = n["prepend"] + text if text else text
            elif n["type"] == "Replace":
                text = text.replace(n["pattern"]["String"], n["content"])
            else:
                raise ValueError(n["type"])
        return text

    def pre_tokenize(self, text, at_start):
        pieces = [text]
        for s in self.steps:
            if s["type"] == "Split":
                pieces = [p for piece in pieces for p in regex.findall(s["pattern"]["Regex"], piece)]
            elif s["type"] == "ByteLevel":
                if s.get("add_prefix_space", True):
                    pieces = [p if p.startswith(" ") else " " + p for p in pieces]
                if s.get("use_regex", True):
                    pieces = [p for piece in pieces for p in regex.findall(GPT2, piece)]
            elif s["type"] == "Digits":
                digits = r"\p{N}|\P{N}+" if s["individual_digits"] else r"\p{N}+|\P{N}+"
                pieces = [p for piece in pieces for p in regex.findall(digits, piece)]
            elif s["type"] == "Metaspace":
                marked = []
                for i, p in enumerate(pieces):
                    p = p.replace(" ", s["replacement"])
                    first = s["prepend_scheme"] == "always" or (s["prepend_scheme"] == "first" and at_start and i == 0)
                    if first and not p.startswith(s["replacement"]):
                        p = s["replacement"] + p
                    marked += regex.findall("^[^\u2581]+|\u2581[^\u2581]*", p) if s["split"] else [p]
                pieces = marked
            else:
                raise ValueError(s["type"])
        return [p for p in pieces if p]

    def bpe(self, piece):
        if self.byte_level:
            units = ["".join(BYTE_CHAR[b] for b in piece.encode("utf-8"))]
            units = list(units[0])
        else:
            units = list(piece)
        word = "".join(units)
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        symbols, unk = [], None
        for u in units:
            if u in self.vocab:
                if unk is not None:
                    symbols.append(unk)
                    unk = None
                symbols.append(self.vocab[u])
            elif self.byte_fallback and all("<0x%02X>" % b in self.vocab for b in u.encode("utf-8")):
                symbols.extend(self.vocab["<0x%02X>" % b] for b in u.encode("utf-8"))
            else:
                assert self.unk is not None, f"no token for {u!r}"
                if unk is not None and not self.fuse_unk:
                    symbols.append(unk)
                unk = self.unk
        if unk is not None:
            symbols.append(unk)
        return self.merge(symbols)

    def merge(self, ids):
        nxt = list(range(1, len(ids))) + [-1]
        prv = list(range(-1, len(ids) - 1))
        gone = [False] * len(ids)
        queue = []

        def offer(pos):
            if nxt[pos] >= 0 and (ids[pos], ids[nxt[pos]]) in self.merges:
                rank, new = self.merges[(ids[pos], ids[nxt[pos]])]
                heapq.heappush(queue, (rank, pos, new))

        for i in range(len(ids) - 1):
            offer(i)
        while queue:
            rank, pos, new = heapq.heappop(queue)
            if gone[pos] or nxt[pos] < 0:
                continue
            right = nxt[pos]
            if self.merges.get((ids[pos], ids[right]), (None, None))[1] != new:
                continue
            ids[pos] = new
            gone[right] = True
            nxt[pos] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = pos
            if prv[pos] >= 0:
                offer(prv[pos])
            offer(pos)
        return [i for i, g in zip(ids, gone) if not g]

    def encode(self, text):
        pieces, ids = [], []
        for i, (raw, added) in enumerate(self.split_added(text, False)):
            if added is not None:
                pieces.append([raw, added])
                continue
            for j, (part, part_added) in enumerate(self.split_added(self.normalize(raw), True)):
                if part_added is not None:
                    pieces.append([part, part_added])
                    continue
                pieces.extend([p, -1] for p in self.pre_tokenize(part, i == 0 and j == 0))
        for p, added in pieces:
            ids.extend([added] if added >= 0 else self.bpe(p))
        return pieces, ids

    def decoded(self, pieces):
        """The decoder's text: byte-level gives the pieces back; SentencePiece's turns ▁ to spaces and
        strips the first."""
        text = "".join(p for p, _ in pieces)
        if self.byte_level:
            return text
        text = text.replace("\u2581", " ")
        return text[1:] if text.startswith(" ") else text


ATOMS = (["a", "b", "e", "h", "l", "o", "r", "s", "t", "x", "y", "z", "H", "S", "T", "R", "E", "L", "D", "'", "'s",
          "'S", "'re", "'Ll", "'ve", "'D", "'m", "\u017f", "caf", "Hello", " world", "the"] +
         [" "] * 6 + ["  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085", "\u000b"] +
         ["0", "1", "2", "3", "45", "6789", "12345", "\u00b2", "\u0663", "\u00bd", "\u216b"] +
         [".", ",", "!", "?", "(", ")", "-", "...", "\"", "#", "_", "\u2581"] +
         ["\u00e9", "e\u0301", "a\u0323\u0301", "\u212b", "\u1112", "\u1161", "\u11ab", "\ud55c", "\u4e2d", "\u6587",
          "\u0394", "\u041f", "\U0001F600", "\U0001F680", "\u0627\u0644"])


def corpus(rng, specials, count):
    atoms = ATOMS + specials
    texts = []
    for _ in range(count):
        texts.append("".join(rng.choice(atoms) for _ in range(rng.randint(0, 24))))
    texts += ["I'm here, they'RE 'S", "a 1 12 123 1234 12345", "line1\r\nline2\n\n  end  \n", "Hi!\n\nok ...\r\n",
              "  hello world  ", "(hello)", "caf\u00e9 \u4e2d\u6587 \U0001F600\U0001F600 ok", "x\u00b2\u00b3 \u0663",
              "\tfoo", "\nfoo", "a\u00a0b", "don'\u017f", "end.  ", "''s", "", " ", "a    b  c"]
    return texts


def variants(folder, tmp):
    """Files that are not a family's but use the steps the families' relatives do: Digits after the
    Llama 3 split, ByteLevel's add_prefix_space, and Llama's Metaspace (prepend_scheme first, with
    and without its split) in place of Prepend + Replace."""
    def load(name):
        with open(os.path.join(folder, name + ".json"), encoding="utf-8") as f:
            return json.load(f)
    out = {}
    j = load("llama3")
    j["pre_tokenizer"]["pretokenizers"].insert(1, {"type": "Digits", "individual_digits": True})
    out["llama3+digits"] = j
    j = load("gpt2")
    j["pre_tokenizer"]["add_prefix_space"] = True
    out["gpt2+prefix-space"] = j
    for split in (False, True):
        j = load("llama2")
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": split}
        out["llama2+metaspace" + ("-split" if split else "")] = j
    paths = {}
    for name, j in out.items():
        paths[name] = os.path.join(tmp, name + ".json")
        with open(paths[name], "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
    return paths


def check_family(name, path, tool, rng):
    ref = Reference(path)
    specials = [c for c, _, _ in ref.added]
    texts = corpus(rng, specials, 3000)
    r = subprocess.run([tool, path], input=json.dumps(texts), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name}: tokenizer_check failed ({r.returncode}): {r.stderr}")
    got = json.loads(r.stdout)
    for text, g in zip(texts, got):
        pieces, ids = ref.encode(text)
        for what, mine, want in (("pieces", g["pieces"], pieces), ("ids", g["ids"], ids),
                                 ("decoded text", g["decoded"], ref.decoded(pieces))):
            if mine != want:
                sys.exit(f"{name}: {what} of {text!r} differ:\n  zinf      {mine!r}\n  reference {want!r}")
    return ref, texts


def read_bin(path):
    """The ids of an llm.c token file and their width in bits: 16 (GPT-2's header) or 32 (Llama 3's)."""
    data = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", data[:12])
    formats = {(20240520, 1): ("H", 16), (20240801, 7): ("I", 32)}
    assert (magic, version) in formats, (magic, version)
    code, bits = formats[(magic, version)]
    assert len(data) == 1024 + count * bits // 8, (len(data), count, bits)
    return list(struct.unpack(f"<{count}{code}", data[1024:])), bits


def check_cli(name, path, ref, zinf, tmp, bits=16, extra=""):
    folder = os.path.join(tmp, name)
    docs = os.path.join(tmp, name + "-docs")
    os.makedirs(folder)
    os.makedirs(docs)
    with open(path, encoding="utf-8") as src, open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as dst:
        dst.write(src.read())
    texts = ["Hello world's 12345\r\n" + extra, "caf\u00e9 na\u00efve \u4e2d\u6587 \U0001F600  x\n"]
    want = []
    for i, text in enumerate(texts):
        with open(os.path.join(docs, f"{i}.txt"), "w", encoding="utf-8") as f:
            f.write(text)
        want += ref.start + ref.encode(text)[1]
    out = os.path.join(tmp, name + ".bin")
    r = subprocess.run([zinf, "tokenize", "--tokenizer", folder, "-o", out, docs], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name}: zinf tokenize failed ({r.returncode}): {r.stderr}")
    if read_bin(out) != (want, bits):
        sys.exit(f"{name}: zinf tokenize wrote {read_bin(out)}, the reference {(want, bits)}")
    if f"{bits}-bit ids" not in r.stdout:
        sys.exit(f"{name}: zinf tokenize did not say it wrote {bits}-bit ids: {r.stdout!r}")


def check_wide(folder, tool, rng, zinf, tmp):
    """Llama 3's file with an added token past 65535, as its real vocabulary of 128256 has: the
    encoding still matches, and `zinf tokenize` writes llm.c's 32-bit token file."""
    with open(os.path.join(folder, "llama3.json"), encoding="utf-8") as f:
        j = json.load(f)
    j["added_tokens"].append({"id": 65600, "content": "<|wide|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})
    path = os.path.join(tmp, "llama3-wide.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f)
    ref, texts = check_family("llama3-wide", path, tool, rng)
    check_cli("llama3-wide", path, ref, zinf, tmp, bits=32, extra="a<|wide|>b")
    return texts


def check_refusal(folder, zinf, tmp):
    """An unknown Split pattern stops `zinf tokenize` with the file and the pattern named."""
    with open(os.path.join(folder, "llama3.json"), encoding="utf-8") as f:
        j = json.load(f)
    pattern = r"\p{L}+|\p{N}+|[^\p{L}\p{N}]+"
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern
    path = os.path.join(tmp, "unknown-pattern.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f)
    text = os.path.join(tmp, "doc.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("hello")
    r = subprocess.run([zinf, "tokenize", "--tokenizer", path, "-o", os.path.join(tmp, "x.bin"), text],
                       capture_output=True, text=True)
    if r.returncode == 0 or path not in r.stderr or pattern not in r.stderr:
        sys.exit(f"zinf tokenize with an unknown pattern: exit {r.returncode}, stderr {r.stderr!r}")


def main():
    source = os.environ.get("ZINF_SOURCE_DIR", ".")
    tool = os.environ.get("ZINF_TOKENIZER_CHECK", "build/tests/tokenizer_check")
    zinf = os.environ.get("ZINF_BINARY", "build/zinf")
    rng = random.Random(20240520)
    folder = os.path.join(source, "tests", "data", "tokenizers")
    names = ["gpt2", "gpt-neox", "llama3", "qwen2", "llama2"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = os.path.join(folder, name + ".json")
            ref, texts = check_family(name, path, tool, rng)
            check_cli(name, path, ref, zinf, tmp)
            print(f"ok: {name}: pieces, ids and decoded text of {len(texts)} texts as the reference; zinf tokenize too")
        check_refusal(folder, zinf, tmp)
        print("ok: an unknown Split pattern is refused by zinf tokenize naming the file and the pattern")
        texts = check_wide(folder, tool, rng, zinf, tmp)
        print(f"ok: llama3 with an added id past 65535: {len(texts)} texts as the reference; zinf tokenize wrote 32 bits")
        for name, path in variants(folder, tmp).items():
            ref, texts = check_family(name, path, tool, rng)
            print(f"ok: {name}: pieces, ids and decoded text of {len(texts)} texts as the reference")


if __name__ == "__main__":
    main()
