"""What a learner wrote, as the teacher's terminal and gradebook show it: never a control character
or escape sequence that acts on the terminal (`clean`, `first_line`), and a learner's name with its
invisible characters escaped (`visible`), never stripped into another learner's name.

The lowest module of the room: the submissions, the evidence and the gradebook all show names and
messages through it.
"""

from __future__ import annotations

import re


def first_line(text: str) -> str:
    """The first non-empty line of `text`, cleaned (`clean`)."""
    text = clean(str(text), keep_lines=True).strip()
    return text.splitlines()[0].strip() if text else ""


def clean(text: str, keep_lines: bool = False) -> str:
    """`text` without terminal escape sequences or control characters (a learner's message is
    printed to the teacher's terminal); line breaks kept where asked."""
    text = re.sub(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])", "", str(text))
    keep = "\n" if keep_lines else ""
    return "".join(ch for ch in text if ch in keep or (ch.isprintable() and ch not in "\u2028\u2029")
                   or ch == " ")


def visible(name: str) -> str:
    """`name` as a teacher can tell it from any other: every character that shows nothing (a
    zero-width space, a direction mark, a control character, an undecodable byte) written as its
    escape (`\\u200b`), a backslash doubled, so that two names that differ show differently."""
    out = []
    for ch in str(name):
        if ch == "\\":
            out.append("\\\\")
        elif ch == " " or ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join(out)
