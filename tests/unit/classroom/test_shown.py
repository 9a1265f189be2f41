"""Tests of `perflab.classroom.shown`: a learner's names and messages as the teacher sees them."""

from __future__ import annotations

from perflab.classroom import shown as S


def test_a_name_shows_its_invisible_characters_escaped():
    assert S.visible("r-f6-right-07") == "r-f6-right-07" and S.visible("é ü") == "é ü"
    assert S.visible("r-f6-right-07\u200b") == "r-f6-right-07\\u200b"
    assert S.visible("\u202eevil") == "\\u202eevil" and S.visible("a\\u200b") == "a\\\\u200b"  # never the same
    assert S.visible("tab\there") == "tab\\u0009here"


def test_a_message_loses_its_terminal_escapes_and_keeps_its_first_line():
    assert S.clean("\x1b[31mred\x1b[0m\x07 bell") == "red bell"
    assert S.clean("\x1b]0;title\x07a\nb") == "ab" and S.clean("a\nb", keep_lines=True) == "a\nb"
    assert S.first_line("\n\n  \x1b[1mfirst\x1b[0m  \nsecond") == "first" and S.first_line("") == ""
