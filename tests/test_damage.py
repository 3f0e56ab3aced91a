"""The text-level damage kinds of shardqueue/world/damage.py, checked against hand-worked strings."""
import random

from shardqueue.world.damage import DAMAGES, boilerplate, line_shuffle, mojibake, truncate

DOC = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 0\n    y = 0\n"


def test_four_kinds_named():
    assert set(DAMAGES) == {"mojibake", "boilerplate", "line_shuffle", "truncate"}


def test_mojibake_utf8_read_as_cp1252():
    # "é" is C3 A9 in UTF-8; cp1252 reads C3 as "Ã" and A9 as "©"
    outs = {mojibake("café", random.Random(s)) for s in range(20)}
    assert "cafÃ©" in outs
    # read twice: "Ã" (C3 83) and "©" (C2 A9) -> "Ãƒ" and "Â©"
    assert "cafÃƒÂ©" in outs


def test_mojibake_breaks_ascii_through_utf16():
    out = mojibake("ab", random.Random(0))
    assert out in ("a\x00b\x00", "\x00a\x00b")


def test_line_shuffle_keeps_the_lines_and_changes_their_order():
    outs = [line_shuffle(DOC, random.Random(s)) for s in range(5)]
    for o in outs:
        assert sorted(o.split("\n")) == sorted(DOC.split("\n"))
    assert any(o != DOC for o in outs)


def test_truncate_is_an_inner_fragment():
    text = "".join(chr(97 + i % 26) for i in range(1000))
    for s in range(20):
        o = truncate(text, random.Random(s))
        i = text.find(o, 1)
        assert i >= 1 and 100 <= len(o) <= 400


def test_boilerplate_keeps_the_text_in_order_and_doubles_it():
    paras = DOC.split("\n\n")
    o = boilerplate(DOC, random.Random(3))
    pos = [o.find(p) for p in paras]
    assert all(p >= 0 for p in pos) and pos == sorted(pos)
    assert len(o) >= 2 * len(DOC)


def test_every_kind_is_reproducible_from_its_rng():
    for f in DAMAGES.values():
        assert f(DOC + "é", random.Random(7)) == f(DOC + "é", random.Random(7))
