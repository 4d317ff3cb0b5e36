"""A stage's warnings reach the operator: a count on its phase's row, and the warning lines
marked in its log (the snapshot of both is in test_ui_snapshots.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_ui_widgets import Host
from ui_harness import wait_for

from console.ui.components.logs.log_view import LogView
from console.ui.components.phases.phase_list import PhaseList
from pipeline.events import is_warning_line

T = 1_750_000_000.0


def _status(pid: str, title: str) -> SimpleNamespace:
    return SimpleNamespace(phase=SimpleNamespace(id=pid, title=title), state="done", reason="",
                           started_at=T, ended_at=T + 192)


def _rows(plist: PhaseList) -> list[str]:
    return [str(plist.get_option_at_index(i).prompt) for i in range(plist.option_count)]


@pytest.mark.parametrize("width", [40, 100])
async def test_a_phase_row_counts_its_warnings_beside_its_duration(width: int) -> None:
    plist = PhaseList(clock=lambda: T + 600)
    async with Host(plist).run_test(size=(width, 10)) as pilot:
        statuses = [_status("merge", "Merge and shuffle the regenerated datasets"), _status("train", "Train")]
        plist.show(statuses, warnings={"merge": 12})
        await wait_for(pilot, lambda: plist.option_count == 2, what="the rows")
        merge, train = _rows(plist)
        assert "⚠12 3m12s" in merge and "⚠" not in train
        title = merge.split("merge", 1)[1].split("⚠")[0].strip()
        assert "Merge and shuffle the regenerated datasets".startswith(title.rstrip("…"))
        assert title.rstrip("…").split()[-1] in ("Merge", "and", "shuffle", "the", "regenerated", "datasets")
        assert len(merge) == len(train)  # the count takes the title's room: the columns stay put
        plist.show(statuses)
        await wait_for(pilot, lambda: "⚠" not in _rows(plist)[0], what="the count gone with a run without one")


def test_the_lines_a_stage_warns_with_are_told_from_the_rest() -> None:
    assert is_warning_line("merge: warning: skipped 3 records with no assistant turn")
    assert is_warning_line("/x/site-packages/torch/a.py:12: UserWarning: TypedStorage is deprecated")
    assert is_warning_line("warning: cannot write events to /x ($EAGLE3_EVENTS): denied; continuing without them")
    assert not is_warning_line("merge: wrote 1,000 records, warning count 0")
    assert not is_warning_line("  merge: warning: an indented quote of one")


async def test_every_row_of_a_warning_is_marked_in_a_wrapped_log_and_no_other() -> None:
    view = LogView(wrap=True)
    warning = "regenerate: warning: " + " ".join(["the answer ran to --max-new-tokens"] * 3)
    lines = ["regenerate: started", warning, "regenerate: done"]
    async with Host(view).run_test(size=(40, 12)) as pilot:
        view.append(lines)
        await wait_for(pilot, lambda: view.settled and view.line_count_rows() > 3, what="the rows wrapped")
        marked = view.get_component_rich_style("log-view--warning", partial=True)
        rows = [view.render_line(y) for y in range(view.line_count_rows())]
        warned = [bool(row._segments) and row._segments[0].style is not None
                  and row._segments[0].style.bold is True and row._segments[0].style.color == marked.color
                  for row in rows]
        assert warned == [False] + [True] * (len(rows) - 2) + [False]
        assert rows[1].text.startswith("regenerate: warning:")
