"""Writes the small tokenizer.json files beside it: each family's sections (normalizer,
pre_tokenizer, added_tokens, post_processor, decoder, model options) as Hugging Face's tokenizers
ships them for that family, around a small vocabulary and merges made here. The ids of special
tokens are small (the real files have them at 50256, 128000, 151643, ...), nothing else differs.

    /usr/bin/python3 tests/data/tokenizers/make_tokenizers.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from gpt2_bytes import byte_char_table  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_chars():
    table = byte_char_table()
    return [table[b] for b in range(256)]


# Merges in GPT-2's alphabet (Ġ is the space, Ċ the newline): words of the test texts, a space run,
# a digit run, a contraction and a two-byte letter (é is Ã©).
BYTE_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "in g", "Ġ a", "n d", "Ġa nd", "' s", "' t", "1 2", "12 3", "Ġ Ġ",
               "ĠĠ ĠĠ", "Ċ Ċ", "l l", "e r", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "H e", "He ll", "Hell o",
               "Ã ©", "c af", "a f", "caf Ã©", "Ġ 1", "x y", "r e", "' re"]


def byte_level_vocab(extra=()):
    vocab = {c: i for i, c in enumerate(byte_chars())}
    for merge in BYTE_MERGES:
        vocab.setdefault(merge.replace(" ", ""), len(vocab))
    for token in extra:
        vocab.setdefault(token, len(vocab))
    return vocab


def added(id_, content, special=True, normalized=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": normalized, "special": special}


def gpt2():
    vocab = byte_level_vocab()
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": eot, "special": True, "content": "<|endoftext|>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True},
            "model": {"dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": False, "vocab": vocab, "merges": BYTE_MERGES}}


def gpt_neox():
    # <|endoftext|> and <|padding|> first, then the bytes; runs of 4, 3 and 2 plain spaces as
    # normalized, non-special added tokens (the real file has runs of 2 to 24).
    vocab = {"<|endoftext|>": 0, "<|padding|>": 1}
    for c in byte_chars():
        vocab[c] = len(vocab)
    for merge in BYTE_MERGES:
        vocab.setdefault(merge.replace(" ", ""), len(vocab))
    spaces = [added(len(vocab) + i, " " * n, special=False, normalized=True) for i, n in enumerate((4, 3, 2))]
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added(0, "<|endoftext|>"), added(1, "<|padding|>")] + spaces,
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "vocab": vocab,
                      "merges": BYTE_MERGES}}


def llama3():
    # "xyz" is a whole token no merge makes: ignore_merges gives it to the piece "xyz" directly.
    vocab = byte_level_vocab(extra=["xyz"])
    first = len(vocab)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
             "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    bos = first
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added(first + i, name) for i, name in enumerate(names)],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
            "post_processor": {"type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                {"type": "TemplateProcessing",
                 "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                            {"Sequence": {"id": "A", "type_id": 0}}],
                 "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                          {"Sequence": {"id": "A", "type_id": 0}},
                          {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                          {"Sequence": {"id": "B", "type_id": 1}}],
                 "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                          "tokens": ["<|begin_of_text|>"]}}}]},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                      "vocab": vocab, "merges": [m.split(" ") for m in BYTE_MERGES]}}


def qwen2():
    vocab = byte_level_vocab(extra=["xyz"])
    first = len(vocab)
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added(first, "<|endoftext|>"), added(first + 1, "<|im_start|>"),
                             added(first + 2, "<|im_end|>")],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2}, "behavior": "Isolated", "invert": False}, level]},
            "post_processor": level,
            "decoder": level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": BYTE_MERGES}}


def llama2():
    # SentencePiece converted: <unk> <s> </s>, the 256 byte tokens, then pieces over '▁'-marked text.
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    merges = ["▁ t", "h e", "▁t he", "▁ H", "e l", "l o", "el lo", "▁H ello", "▁ w", "o r", "▁w or", "l d",
              "▁wor ld", "▁ ▁", "▁▁ ▁▁", "i n", "▁ in", "1 2"]
    for c in "▁abcdefghijklmnopqrstuvwxyzHW'.,!?0123456789é":
        vocab.setdefault(c, len(vocab))
    for m in merges:
        vocab.setdefault(m.replace(" ", ""), len(vocab))
    template = {"single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": None,
            "post_processor": dict(type="TemplateProcessing", **template),
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                      "vocab": vocab, "merges": merges}}


for name, make in (("gpt2", gpt2), ("gpt-neox", gpt_neox), ("llama3", llama3), ("qwen2", qwen2),
                   ("llama2", llama2)):
    with open(os.path.join(HERE, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(make(), f, ensure_ascii=False, indent=1)
        f.write("\n")
