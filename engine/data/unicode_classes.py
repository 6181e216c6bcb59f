"""Writes unicode_classes.inc: the code point ranges the pre-tokenizer patterns (GPT-2's, Llama 3's,
Qwen2's) call letters (\\p{L}), numbers (\\p{N}) and whitespace (\\s), as the `regex` module that
GPT-2's encoder uses decides them (so zinf splits text where the families' encoders do).

    /usr/bin/python3 engine/data/unicode_classes.py > engine/data/unicode_classes.inc
"""
import regex


def ranges(pattern):
    compiled = regex.compile(pattern)
    out, start = [], None
    for cp in range(0x110000):
        hit = bool(compiled.match(chr(cp)))
        if hit and start is None:
            start = cp
        if not hit and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def table(name, pattern):
    rs = ranges(pattern)
    print(f"// {pattern}: {len(rs)} ranges")
    print(f"constexpr CodeRange {name}[] = {{")
    for i in range(0, len(rs), 6):
        print("    " + " ".join("{0x%X, 0x%X}," % r for r in rs[i:i + 6]))
    print("};")


print(f"// Made by unicode_classes.py with the regex module {regex.__version__}. Do not edit by hand.")
table("kLetters", r"\p{L}")
table("kNumbers", r"\p{N}")
table("kSpaces", r"\s")
