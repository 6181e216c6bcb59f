"""GPT-2's byte-to-unicode map, as the Python tokenizer tests and the test-tokenizer generator
write vocabulary entries: printable Latin-1 bytes stand for themselves, the other 68 bytes for
U+0100 onwards in byte order."""


def byte_char_table():
    """A dict from each byte value (0..255) to the character GPT-2's vocabulary files write for it."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table
