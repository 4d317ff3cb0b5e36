"""The phase a console opens on when an operator attaches to a walk: the live one, the next to
do, or, when the walk is over, its last result rather than its first step."""

from console.core.lifecycle.state import PhaseStatus
from console.core.model.config import Phase
from console.ui.screens.main.follow import PhaseFollow


def follow(*rows: tuple[str, str, float | None]) -> PhaseFollow:
    f = PhaseFollow()
    f.statuses = [PhaseStatus(phase=Phase(id=pid, title=pid, argv=("true",)), state=state, ended_at=ended)
                  for pid, state, ended in rows]
    return f


def test_a_finished_walk_opens_on_the_phase_that_ended_last():
    f = follow(("split", "done", 100.0), ("train", "done", 900.0), ("evaluate-a", "done", 990.0),
               ("evaluate-b", "done", 985.0))
    assert f.worth_opening() == "evaluate-a"


def test_a_live_phase_comes_first_then_the_first_not_done():
    assert follow(("split", "done", 1.0), ("train", "running", None), ("export", "ready", None)).worth_opening() == "train"
    assert follow(("split", "done", 1.0), ("train", "failed", 5.0), ("export", "pending", None)).worth_opening() == "train"


def test_an_untouched_project_opens_on_its_first_phase():
    assert follow(("split", "ready", None), ("train", "pending", None)).worth_opening() == "split"
    assert follow(("a", "done", None), ("b", "done", None)).worth_opening() == "a"
