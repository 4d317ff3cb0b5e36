"""A change from outside, seen by an open console: an `eagle3 set` from another shell, or a
rerun of some phases, leaves the screen exactly as a console started afresh would draw it
(every phase on its row with its duration and state, the selection kept, no orphan line, no
stray scrollbar, the override named in the title). The pipeline is demo-shaped
(tests/ui/redraw_project.py): its runs are real, their times pinned."""

from __future__ import annotations

import io
import shutil
import time
from pathlib import Path

import pytest
from redraw_project import PHASES, finished_template, pin_runs
from rich.console import Console
from ui_harness import FROZEN, T0, finish, make_app, stop_all, wait_for

from console.core.config.saved import save_overrides
from console.core.lifecycle.project import Project
from console.ui.components.logs.journal_view import JournalView
from console.ui.components.logs.log_view import LogView
from console.ui.components.phases.phase_list import PhaseList
from console.ui.components.phases.phases_title import phases_title, short_path
from console.ui.messages import LogLines

SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
LOG_PATH = "/data/eagle3/state/runs/train/20260101-000000-abcd/output.log"
RERUN = ("demo-assets", "regenerate", "merge")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """Every phase run once (eight real runs) for the whole module; each test copies it."""
    return finished_template(tmp_path_factory.mktemp("redraw"))


@pytest.fixture
def pipeline(template: Path, tmp_path: Path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TZ", "UTC")  # times on screen are local: pin the zone
    time.tzset()
    shutil.copytree(template.parent, tmp_path / "p")
    project = Project.load(tmp_path / "p" / template.name)
    yield project
    stop_all(project)
    monkeypatch.undo()
    time.tzset()


def _app(project: Project):  # type: ignore[no-untyped-def]
    return make_app(project, intervals=FROZEN, clock=lambda: T0 + 3600)


def screen_text(app) -> tuple[list[str], str]:  # type: ignore[no-untyped-def]
    """The whole screen: its rows as text, and as the terminal gets them, colours included."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    styled = console.export_text(styles=True, clear=False)
    return console.export_text().splitlines(), styled


async def _look(pilot, until) -> None:  # type: ignore[no-untyped-def]
    """Ask the status poller to look until `until()` holds, as its next tick would."""
    main = pilot.app.main_screen()

    def looked() -> bool:
        if until():
            return True
        main.pollers["status"].poke()
        return False

    await wait_for(pilot, looked, timeout=30, what="the change seen")


async def _selected(pilot, selected: str = "train") -> None:  # type: ignore[no-untyped-def]
    main = pilot.app.main_screen()
    await wait_for(pilot, lambda: main.query(PhaseList) and len(main.query_one(PhaseList).rows) == len(PHASES),
                   what="every phase listed")
    plist = main.query_one(PhaseList)
    plist.select_id(selected)
    await wait_for(pilot, lambda: main.selected == selected, what=f"{selected} selected")


async def _pinned(pilot, selected: str = "train") -> None:  # type: ignore[no-untyped-def]
    """Nothing left to change the screen: pollers stopped and drained, the log and journal
    panes pinned (their files carry real times), toasts gone. `selected` is kept."""
    app = pilot.app
    main = app.main_screen()
    assert main.selected == selected
    for poller in main.pollers.values():
        poller.stop(wait=10)
    status = main.pollers["status"]
    await wait_for(pilot, lambda: main.follow.looks == status.posted, what="the last snapshot handled")
    await app.workers.wait_for_complete()
    log = main.query_one("#log", LogView)
    pinned = f"{selected}: done"

    posted = [-1.0]

    def pinned_and_drawn() -> bool:
        # a stopped poller's last post can still be on its way from its thread and land after
        # ours, replacing the pinned lines: post again (each second at most) until ours is shown
        if log.last_line != pinned:
            if time.monotonic() - posted[0] >= 1.0:
                posted[0] = time.monotonic()
                main.post_message(LogLines("pinned", [pinned], "", reset=True, path=LOG_PATH))
            return False
        return log.settled

    await wait_for(pilot, pinned_and_drawn, timeout=30, what="the pinned log")
    main.query_one("#journal", JournalView).show(
        [{"t": T0, "event": "run_ended", "phase": selected, "run_id": "20260101-000000-abcd", "user": "ops",
          "code": 0}], show_phase=False)
    app.clear_notifications()
    await wait_for(pilot, lambda: not app.screen.query("Toast"), what="no toast left")
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


async def _set_limit(pilot, project: Project) -> None:  # type: ignore[no-untyped-def]
    """`eagle3 set cfg.yaml limit=8` from another shell, seen by the open console."""
    main = pilot.app.main_screen()
    plist = main.query_one(PhaseList)
    await wait_for(pilot, lambda: len(plist.rows) == len(PHASES), what="every phase listed")
    save_overrides(str(project.config.path), ["limit=8"], [])
    await _look(pilot, lambda: all(r.state == "stale" for r in plist.rows))


async def _rerun(pilot, project: Project) -> None:  # type: ignore[no-untyped-def]
    """After the set: the first three phases run again from another shell."""
    await _set_limit(pilot, project)
    finish(Project.load(project.config.path), *RERUN)
    pin_runs(project, *RERUN)
    plist = pilot.app.main_screen().query_one(PhaseList)
    await _look(pilot, lambda: [r.state for r in plist.rows[:3]] == ["done"] * 3
                and plist.rows[0].duration == "1m23s")


async def _fresh_text(project: Project, size: tuple[int, int], selected: str) -> tuple[list[str], str]:
    app = _app(Project.load(project.config.path))
    async with app.run_test(size=size) as pilot:
        await _selected(pilot, selected)
        await _pinned(pilot, selected)
        return screen_text(app)


@SIZES
@pytest.mark.parametrize("change", [_set_limit, _rerun], ids=["set", "rerun"])
async def test_a_change_from_outside_draws_what_a_fresh_start_draws(pipeline, size, change) -> None:  # type: ignore[no-untyped-def]
    app = _app(pipeline)
    async with app.run_test(size=size) as pilot:
        await _selected(pilot, "train")
        await change(pilot, pipeline)
        await _pinned(pilot, "train")
        seen = screen_text(app)
        plist = app.main_screen().query_one(PhaseList)
        assert "set limit=8" in str(plist.border_title)
    fresh = await _fresh_text(pipeline, size, "train")
    assert seen[0] == fresh[0]
    assert seen[1] == fresh[1]  # the colours too: the selection, the states


@SIZES
@pytest.mark.parametrize("change", [None, _set_limit, _rerun], ids=["before", "after-set", "after-rerun"])
def test_the_phase_list_after_a_change_from_outside(snap_compare, pipeline, size, change) -> None:  # type: ignore[no-untyped-def]
    """Snapshots: the finished pipeline, then an `eagle3 set` that makes every phase stale,
    then three of them run again."""

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _selected(pilot, "train")
        if change is not None:
            await change(pilot, pipeline)
        await _pinned(pilot, "train")

    assert snap_compare(_app(pipeline), terminal_size=size, run_before=settle)


def test_the_title_names_an_override_in_full_where_it_fits_and_cuts_only_at_a_word() -> None:
    saved = {"assets": "./.eagle3-demo/assets2", "regen_limit": "8"}
    target = "./.eagle3-demo/assets2/target"
    assert phases_title("demo", saved, 80) == "phases · demo · set assets=./.eagle3-demo/assets2, regen_limit=8"
    words = set()
    for form in ({**saved}, {k: short_path(v) for k, v in saved.items()}):
        words |= set(phases_title("demo", form, 500, target=target).split())
    words |= {"assets,", "regen_limit", "phases"}
    for width in range(12, 90):
        title = phases_title("demo", saved, width, target=target)
        assert len(title) <= width, (width, title)
        assert all(w.rstrip("…") in words or w == "…" for w in title.split()), (width, title)  # no word cut inside
        if width >= 40:  # "target …/target · demo · set assets, …"
            assert "set assets" in title, (width, title)
