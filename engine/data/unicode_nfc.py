"""Writes unicode_nfc.inc: the tables Unicode Normalization Form C needs (canonical combining
classes, canonical decompositions one level deep, primary compositions), as Python's unicodedata
holds them, for the NFC normalizer that Qwen2's and GPT-NeoX's tokenizer.json name.

    /usr/bin/python3 engine/data/unicode_nfc.py > engine/data/unicode_nfc.inc
"""
import unicodedata


def combining_classes():
    out, start, cls = [], None, 0
    for cp in range(0x110001):
        c = unicodedata.combining(chr(cp)) if cp < 0x110000 else 0
        if c != cls:
            if cls:
                out.append((start, cp - 1, cls))
            start, cls = cp, c
    return out


def decompositions():
    """Canonical (not compatibility) decompositions, one level: cp -> (first, second or 0)."""
    out = []
    for cp in range(0x110000):
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(p, 16) for p in d.split()]
        assert len(parts) in (1, 2), (hex(cp), d)
        out.append((cp, parts[0], parts[1] if len(parts) == 2 else 0))
    return out


def compositions(decomp):
    """The pairs NFC composes: a two-part decomposition that NFC puts back together (exclusions,
    singletons and non-starter decompositions are left out by that test)."""
    out = []
    for cp, a, b in decomp:
        if b and unicodedata.normalize("NFC", chr(a) + chr(b)) == chr(cp):
            out.append((a, b, cp))
    return sorted(out)


def emit(name, kind, rows, per_line):
    print(f"constexpr {kind} {name}[] = {{")
    for i in range(0, len(rows), per_line):
        print("    " + " ".join("{" + ", ".join("0x%X" % v for v in r) + "}," for r in rows[i:i + per_line]))
    print("};")


print(f"// Made by unicode_nfc.py from Unicode {unicodedata.unidata_version}. Do not edit by hand.")
decomp = decompositions()
emit("kCombiningClasses", "CombiningRange", combining_classes(), 4)
emit("kDecompositions", "Decomposition", decomp, 4)
emit("kCompositions", "Composition", compositions(decomp), 4)
