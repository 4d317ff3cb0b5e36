"""What makes a question the target wrote worth answering: the filters that need only the
question itself. Each refusal is a Failure whose reason is the stats key it is counted under,
and whose detail shows the question (the stats keep a few of each as examples).

- `loop`: its tokens end in an exact loop (regenerate's loop rule, loops.py), ended or not;
- `unfinished`: it ran to --max-question-tokens without closing its turn;
- `not_text`: it holds one of the template's control tokens, bytes that do not decode, control
  characters, or mostly characters that are not letters (less than MIN_LETTER_SHARE of them);
- `too_short`: fewer than --min-question-chars characters once stripped (an empty question too).

Duplicates need the questions kept before it: dedup.py.
"""

from __future__ import annotations

import unicodedata

from pipeline.regenerate.conversation import Generated
from pipeline.regenerate.errors import Failure
from pipeline.regenerate.loops import loop_tail

MIN_LETTER_SHARE = 0.3  # of the characters that are not spaces: "Solve 3x^2 + 5x - 2 = 0" has 0.41
SHOWN = 200  # characters of a question in a failure's detail
_ALLOWED_CONTROLS = frozenset("\n\t\r")
_NOT_TEXT = frozenset({"Cc", "Cs", "Co", "Cn"})  # controls, surrogates, private use, unassigned


def shown(text: str) -> str:
    return repr(text[:SHOWN] + ("..." if len(text) > SHOWN else ""))


def not_text(text: str) -> str | None:
    """Why `text` is not text a user writes, or None."""
    if "\ufffd" in text:
        return "holds bytes that do not decode as UTF-8"
    bad = next((c for c in text if c not in _ALLOWED_CONTROLS and unicodedata.category(c) in _NOT_TEXT), None)
    if bad is not None:
        return f"holds the control character U+{ord(bad):04X}"
    visible = [c for c in text if not c.isspace()]
    letters = sum(c.isalpha() for c in visible)
    if visible and letters < MIN_LETTER_SHARE * len(visible):
        return f"is mostly not letters ({letters} of {len(visible)} characters)"
    return None


def judge(gen: Generated, text: str, controls: frozenset[int], min_chars: int, bound: int) -> Failure | None:
    """The filter a generated question fails, or None. `controls`: the tokenizer's special
    token ids; `bound`: --max-question-tokens."""
    if gen.cut or loop_tail(gen.tokens) is not None:
        return Failure("loop", f"the question fell into a loop: {shown(text)}")
    if not gen.ended:
        return Failure("unfinished", f"the question ran to --max-question-tokens {bound} without ending its "
                       f"turn: {shown(text)}")
    if any(t in controls for t in gen.tokens):
        return Failure("not_text", f"the question holds a control token of the template: {shown(text)}")
    stripped = text.strip()
    if len(stripped) < min_chars:
        return Failure("too_short", f"a question of {len(stripped)} characters, fewer than --min-question-chars "
                       f"{min_chars}: {shown(stripped)}")
    why = not_text(stripped)
    if why is not None:
        return Failure("not_text", f"the question {why}: {shown(stripped)}")
    return None
