"""A long log line in a narrow pane (the detail log at 80x24) wraps between words: a figure
such as an accuracy or a path is read whole, never as "0" on one row and ".381" on the next."""

from console.ui.components.logs.wrapped_rows import WRAP_INDENT, WRAP_MAX_ROWS, wrap_rows

LINE = ("train: step 564/2829 loss 9.9071 acc 0.486 0.422 0.397 0.381 0.368 0.356 0.345 | "
        "80,464 tok/s lr 9.20e-04")


def test_a_log_line_wraps_between_words_and_keeps_every_figure_whole():
    rows = wrap_rows(LINE, 52)
    assert len(rows) > 1 and all(len(r) <= 52 for r in rows)
    assert all(r.startswith(WRAP_INDENT) for r in rows[1:])
    words = [w for r in rows for w in r.split()]
    assert words == LINE.split()  # each word whole, on one row, in order


def test_a_word_longer_than_a_row_is_still_cut_to_fit():
    path = "/data/" + "x" * 120 + "/output.log"
    rows = wrap_rows(f"reading {path} now", 40)
    assert all(len(r) <= 40 for r in rows)
    assert "".join(r.replace(" ", "") for r in rows) == f"reading{path}now"  # nothing lost


def test_a_line_past_the_row_bound_ends_in_an_ellipsis_within_the_width():
    rows = wrap_rows(" ".join(["word"] * 2000), 30)
    assert len(rows) == WRAP_MAX_ROWS and rows[-1].endswith("…") and all(len(r) <= 30 for r in rows)
