"""Every theme starts: the console's own and every Textual built-in, with a dialog and a
toast on screen (their widgets read theme variables the main screen does not). And when
the console does break, the operator gets one line, a crash log and a non-zero exit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.theme import BUILTIN_THEMES, Theme
from ui_harness import FROZEN, fixed_sources, make_app, showing, wait_for, write_config

from console.core.lifecycle.project import Project
from console.ui import app as app_module
from console.ui.app import run_console
from console.ui.crashlog import EXIT_CRASH
from console.ui.screens.ask_dialog import AskDialog
from console.ui.theming import load_themes, themes_dir

ALL_THEMES = [t.name for t in load_themes()] + sorted(BUILTIN_THEMES)


@pytest.fixture(scope="module")
def one_project(tmp_path_factory):  # type: ignore[no-untyped-def]
    return Project.load(write_config(tmp_path_factory.mktemp("themes")))


@pytest.mark.parametrize("theme", ALL_THEMES)
async def test_console_starts_with_every_theme(one_project, theme: str) -> None:  # type: ignore[no-untyped-def]
    app = make_app(one_project, intervals=FROZEN, theme=theme)
    async with app.run_test(size=(80, 24)) as pilot:
        main = app.main_screen()
        await wait_for(pilot, lambda: main.follow.statuses, what="first statuses")
        assert app.theme == theme
        app.push_screen(AskDialog("a question?", "with buttons", yes="Yes"))
        app.notify("a toast")
        await wait_for(pilot, lambda: showing(app, AskDialog), what="dialog")
        await pilot.pause()
    assert app.crash is None and app.return_code in (None, 0)


def test_a_crash_is_one_line_a_log_and_a_nonzero_exit(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    broken = Theme(name="eagle3-broken", primary="#112233", ansi=True)  # no ansi-background: Textual's CSS fails
    monkeypatch.setattr(app_module, "load_themes", lambda: [broken])
    project = Project.load(write_config(tmp_path))
    code = run_console(project, theme="eagle3-broken", screenshot=tmp_path / "s.svg", screenshot_after=30,
                       size=(80, 24), **fixed_sources())
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_CRASH
    assert len(err) == 1 and "the console crashed" in err[0] and "ansi-background" in err[0]
    log = Path(err[0].rsplit("(details: ", 1)[1].rstrip(")"))
    assert log.is_file() and "Traceback" in log.read_text()
    assert log.parent == project.config.state_dir / "crash"
    assert not (tmp_path / "s.svg").exists()


def test_a_checkout_finds_its_themes_when_the_install_predates_them(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An editable install made before themes/ moved to the top level does not map `themes`:
    the console still loads the checkout's own, not the built-in fallback."""
    monkeypatch.setitem(sys.modules, "themes", None)  # `import themes` now fails
    checkout = Path(app_module.__file__).resolve().parents[2]
    assert themes_dir() == checkout / "themes"
    dark = next(t for t in load_themes() if t.name == "eagle3-dark")
    assert dark.primary.upper() == "#5FA8D3"


def test_a_screenshot_with_no_delay_waits_for_the_main_screens_first_reading(tmp_path: Path) -> None:
    """On a loaded machine the delay can pass before the first snapshot is drawn: the picture
    must still show the console (it was a blank strip), and a delay of 0 must not hang it."""
    project = Project.load(write_config(tmp_path))
    shot = tmp_path / "shot.svg"
    code = run_console(project, screenshot=shot, screenshot_after=0, size=(100, 30), **fixed_sources())
    assert code == 0
    svg = shot.read_text().replace("&#160;", " ")
    assert f"phases · {project.config.name}" in svg


def test_a_screenshot_delay_that_is_not_a_number_of_seconds_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(app_module.SCREENSHOT_AFTER_ENV, "nan")
    project = Project.load(write_config(tmp_path))
    assert run_console(project, screenshot=tmp_path / "s.svg", size=(80, 24), **fixed_sources()) == 2
    assert "EAGLE3_SCREENSHOT_AFTER='nan'" in capsys.readouterr().err
    assert not (tmp_path / "s.svg").exists()
