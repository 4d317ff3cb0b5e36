"""A worker of the main screen that fails, as the operator meets it: one error notice that
names what failed, never a traceback, and a console that keeps working; the background
pre-flight fails without a word (the operator's own check says it)."""

from __future__ import annotations

from textual.message import Message
from textual.worker import Worker, WorkerState
from ui_harness import FAST, Notices, make_app, select, state_of, wait_for

from console.core.flow import startflow
from console.core.lifecycle.project import Project
from console.core.text.errors import Eagle3Error
from console.ui.components.phases.phase_list import PhaseList
from console.ui.screens.main.reads import Intervals


class Seen(Notices):
    """The notices, and the workers that ended in error (name, group)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: list[tuple[str, str]] = []

    def hook(self, message: Message) -> None:
        super().hook(message)
        if isinstance(message, Worker.StateChanged) and message.state is WorkerState.ERROR:
            self.failed.append((message.worker.name, message.worker.group))

    def errors(self) -> list[str]:
        return [text for severity, text in self.posted if severity == "error"]


class Unreadable:
    """A project call that fails the way a config gone unreadable under the console does."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, phase_id: str, *args: object, **kw: object) -> object:
        self.calls += 1
        raise PermissionError(13, "Permission denied", "cfg.yaml")


async def test_a_failing_check_is_one_notice_naming_it_and_the_console_stays_up(project) -> None:  # type: ignore[no-untyped-def]
    seen = Seen()
    app = make_app(project)
    real_check = project.check
    project.check = Unreadable()  # type: ignore[method-assign]
    async with app.run_test(size=(100, 30), message_hook=seen.hook) as pilot:
        await select(pilot, app, "prep")
        await pilot.press("c")
        await wait_for(pilot, lambda: seen.failed and seen.errors(), what="the failed check's notice")
        await pilot.pause()
        assert seen.failed == [("check prep", "checks")]
        assert seen.errors() == ["check prep failed: PermissionError: [Errno 13] Permission denied: 'cfg.yaml'"]
        assert not any("Traceback" in text for text in seen.texts)
        assert app.is_running and app.return_code is None and app.screen is app.main_screen()
        project.check = real_check  # type: ignore[method-assign]  # readable again: the same key works
        await pilot.press("c")
        await wait_for(pilot, lambda: "prep: checks passed (1)" in seen.texts, what="the check passing")
        assert len(seen.errors()) == 1


async def test_a_failing_stop_shows_the_projects_own_words(project) -> None:  # type: ignore[no-untyped-def]
    """An `Eagle3Error` already speaks to the operator: shown as it is."""
    seen = Seen()
    console_project = Project.load(project.config.path)  # the console's; `project` cleans up

    def refuse(phase_id: str, *args: object, **kw: object) -> bool:
        raise Eagle3Error(f"cannot signal {phase_id}'s process group: operation not permitted; "
                          f"stop it as the user who started it")

    project.start("sleeper")
    console_project.stop = refuse  # type: ignore[method-assign]
    app = make_app(console_project)
    async with app.run_test(size=(100, 30), message_hook=seen.hook) as pilot:
        await select(pilot, app, "sleeper")
        await wait_for(pilot, lambda: state_of(app, "sleeper") == "running", what="sleeper running")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.screen is not app.main_screen(), what="the stop question")
        await pilot.press("y")
        await wait_for(pilot, lambda: seen.failed and seen.errors(), what="the failed stop's notice")
        await pilot.pause()
        assert seen.failed == [("stop sleeper", "stop")]
        assert seen.errors() == ["cannot signal sleeper's process group: operation not permitted; "
                                 "stop it as the user who started it"]
        assert app.is_running and state_of(app, "sleeper") == "running"


async def test_a_failing_background_preflight_shows_nothing_until_the_operator_checks(project) -> None:  # type: ignore[no-untyped-def]
    seen = Seen()
    app = make_app(project, intervals=Intervals(**{**vars(FAST), "preflight": 60.0}))
    project.check = Unreadable()  # type: ignore[method-assign]
    async with app.run_test(size=(100, 30), message_hook=seen.hook) as pilot:
        await wait_for(pilot, lambda: seen.failed, what="a background pre-flight failing")
        await wait_for(pilot, lambda: project.check.calls == len(seen.failed), what="every pre-flight ended")
        await pilot.pause()
        assert {group for _, group in seen.failed} == {"preflight"}
        assert seen.errors() == []
        await select(pilot, app, "gated")
        await pilot.press("c")
        await wait_for(pilot, lambda: seen.errors(), what="the operator's check failing")
        await pilot.pause()
        assert seen.errors() == ["check gated failed: PermissionError: [Errno 13] Permission denied: 'cfg.yaml'"]
        assert app.is_running and app.return_code is None


async def test_a_start_that_fails_is_one_notice_and_the_row_stops_saying_starting(project, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The start's worker reports back instead of failing: the flow learns the start is over."""
    seen = Seen()
    monkeypatch.setattr(startflow, "attempt", Unreadable())
    app = make_app(project)
    async with app.run_test(size=(100, 30), message_hook=seen.hook) as pilot:
        await select(pilot, app, "prep")
        await pilot.press("r")
        await wait_for(pilot, lambda: seen.errors(), what="the failed start's notice")
        main = app.main_screen()
        await wait_for(pilot, lambda: not main.flow.starting, what="the start over")
        await pilot.pause()
        assert seen.errors() == ["start prep failed: PermissionError: [Errno 13] Permission denied: 'cfg.yaml'"]
        plist = main.query_one(PhaseList)
        assert "start…" not in str(plist.get_option_at_index(plist.get_option_index("prep")).prompt)
        assert seen.failed == [] and app.is_running and state_of(app, "prep") != "running"
