"""The console application and `run_console`, the entry point the CLI calls."""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen

from console.core.telemetry.disk import DiskSource
from console.core.telemetry.host import HostSource
from console.core.telemetry.nvml import NvmlGpuSource
from console.core.telemetry.shm import ShmSource
from console.ui.components.phases.phase_list import PhaseList
from console.ui.crashlog import EXIT_CRASH, one_line, write_crash_log
from console.ui.messages import StartsLanded
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.main.reads import Intervals
from console.ui.screens.main.screen import MainScreen
from console.ui.theming import load_themes, resolve_theme
from console.ui.watchdog import TtyWatchdog

SCREENSHOT_ENV = "EAGLE3_SCREENSHOT"  # write an SVG of the console here, then exit
SCREENSHOT_AFTER_ENV = "EAGLE3_SCREENSHOT_AFTER"  # seconds to wait first (default 5)
SCREENSHOT_SIZE_ENV = "EAGLE3_SCREENSHOT_SIZE"  # COLSxROWS (default 200x60)
SCREENSHOT_WAIT_S = 120.0  # past the delay, how long the picture may wait for the first reading


class ConsoleApp(App[int]):
    CSS_PATH = "console.tcss"
    TITLE = "eagle3 console"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("ctrl+c", "request_quit", "Quit", show=False, id="app.quit", tooltip="Quit; phases keep running",
                priority=True),
    ]

    def __init__(self, project: Any, *, theme: str | None = None, gpu_source: Any = None,
                 disk_source: Any = None, shm_source: Any = None, host_source: Any = None,
                 clock: Callable[[], float] = time.time, intervals: Intervals | None = None,
                 screenshot: str | os.PathLike[str] | None = None, screenshot_after: float = 5.0,
                 watchdog: bool = False, read_only: bool = False) -> None:
        super().__init__()
        self.read_only = read_only  # a served view without --serve-actions: look, do not act
        self.project = project
        self.clock = clock
        self.intervals = intervals
        self.sources = dict(gpu_source=gpu_source, disk_source=disk_source, shm_source=shm_source,
                            host_source=host_source)
        self.theme_names: list[str] = []
        for t in load_themes():
            self.register_theme(t)
            self.theme_names.append(t.name)
        chosen, self.theme_warning = resolve_theme(theme, self.theme_names + [
            n for n in self.available_themes if n not in self.theme_names])
        self.theme = chosen
        self.screenshot = Path(screenshot) if screenshot else None
        self.screenshot_after = screenshot_after
        self.use_watchdog = watchdog
        self.watchdog: TtyWatchdog | None = None
        self.still_running: list[str] = []
        self.crash: tuple[str, Path] | None = None  # (one line, crash log) once the console broke
        self.title = f"eagle3 · {project.config.name}" + (" (read-only)" if read_only else "")

    def _handle_exception(self, error: Exception) -> None:
        if self.crash is None:
            path = write_crash_log(error, getattr(self.project.config, "state_dir", None))
            self.crash = (one_line(error), path)
        super()._handle_exception(error)

    def _print_error_renderables(self) -> None:
        if self.crash is None:
            super()._print_error_renderables()
            return
        self._exit_renderables.clear()
        line, path = self.crash
        print(f"eagle3: the console crashed: {line} (details: {path})", file=sys.stderr)

    def get_default_screen(self) -> Screen:
        return MainScreen(self.project, clock=self.clock, intervals=self.intervals, read_only=self.read_only,
                          **self.sources)

    def on_mount(self) -> None:
        if self.theme_warning:
            self.notify(self.theme_warning, severity="warning", timeout=10)
        if self.screenshot is not None:
            self.set_timer(max(self.screenshot_after, 0.01), self._take_screenshot)  # Textual divides by it
        if self.use_watchdog:
            self.watchdog = TtyWatchdog(lambda: self.call_from_thread(self.exit, 0))
            self.watchdog.start()

    def on_unmount(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()

    def main_screen(self) -> MainScreen:
        for s in self.screen_stack:
            if isinstance(s, MainScreen):
                return s
        raise LookupError("main screen not mounted")

    def _take_screenshot(self, waited: float = 0.0) -> None:
        """After `screenshot_after`, and once the main screen has drawn its first reading: on a
        loaded machine the timer can fire before the first snapshot, which left an empty picture."""
        try:
            ready = self.main_screen().follow.looks > 0
        except LookupError:
            ready = False
        if not ready and waited < SCREENSHOT_WAIT_S:
            self.set_timer(0.1, lambda: self._take_screenshot(waited + 0.1))
            return
        self.call_after_refresh(self._save_screenshot_and_exit)

    def _save_screenshot_and_exit(self) -> None:
        assert self.screenshot is not None
        self.screenshot.parent.mkdir(parents=True, exist_ok=True)
        self.save_screenshot(filename=self.screenshot.name, path=str(self.screenshot.parent))
        self.exit(0)

    # -- actions --------------------------------------------------------------------------------
    def action_next_theme(self) -> None:
        names = self.theme_names
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def action_request_quit(self) -> None:
        main = self.main_screen()
        running = main.follow.running()
        starting = sorted(main.flow.starting - {s.phase.id for s in running})
        if not running and not starting:
            self.exit(0)
            return
        names = ", ".join(s.phase.id + (f" (pid {s.pid})" if s.pid else "") for s in running)
        bits: list[Any] = []
        if running:
            bits += ["Running phases keep running after you quit: ", (names, "bold"), ".\n"]
        if starting:
            bits += ["Starting (pre-flight checks): ", (", ".join(starting), "bold"),
                     ". The console waits for the start to land, then quits; the phase keeps running.\n"]

        def answer(yes: bool | None) -> None:
            if yes:
                self.still_running = [s.phase.id for s in running]
                if main.flow.starting:
                    main.flow.quit_when_landed()
                    main.notify("quitting once the start lands…", timeout=10)
                    return
                self.exit(0)

        self.push_screen(AskDialog("quit the console?", Content.assemble(
            *bits, ("Start the console again on this config to re-attach to them.", "$text-muted")),
            yes="Quit"), answer)

    def on_starts_landed(self, msg: StartsLanded) -> None:
        """The starts the operator quit during have landed: quit, naming what runs on."""
        main = self.main_screen()
        self.still_running = sorted({*self.still_running, *msg.started, *(s.phase.id for s in main.follow.running())})
        self.exit(0)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        try:
            main = self.main_screen()
        except LookupError:
            yield from super().get_system_commands(screen)
            return
        sel = main.selected or "the selected phase"
        for title, help_text, action in (
            (f"Run {sel}", "Pre-flight checks, then start it detached (r)", main.action_run),
            (f"Stop {sel}", "SIGTERM then SIGKILL to its process group; asks first (s)", main.action_stop),
            (f"Check {sel}", "Run its pre-flight checks (c)", main.action_check),
            (f"Verify {sel}", "Run its verify checks on what it produced (v)", main.action_verify),
            (f"Log of {sel}", "Its log full screen: follow, pause, search (l)", main.action_log),
            (f"History of {sel}", "Its past runs: who, when, exit, overrides; open any log (h)",
             main.action_history),
            ("Journal", "Runs, checks, overrides with reasons, stops (J)", main.action_journal),
            ("Next running phase", "Its log, stats and checks in the detail (n)", main.action_next_live),
            ("Deadline", "Set or clear it: running phases get the stop s sends at it (d)", main.action_deadline),
            ("Help", "Keys and state glyphs (?)", main.action_help),
            ("Next theme", "Cycle the console's themes (t)", self.action_next_theme),
            ("Quit", "Leave the console; running phases keep running (q)", self.action_request_quit),
        ):
            yield SystemCommand(title, help_text, action)
        for name in self.theme_names:
            yield SystemCommand(f"Theme: {name}", "Switch theme", lambda n=name: setattr(self, "theme", n), False)
        for st in main.follow.statuses:
            pid = st.phase.id
            yield SystemCommand(f"Select {pid}", f"{st.phase.title} ({st.state})",
                                lambda p=pid: main.query_one("#phases", PhaseList).select_id(p), False)
            if pid == main.selected:
                continue  # its commands are listed above, once
            for verb, fn in (("Run", main.action_run), ("Check", main.action_check),
                             ("Verify", main.action_verify), ("Stop", main.action_stop),
                             ("Log of", main.action_log), ("History of", main.action_history)):
                yield SystemCommand(f"{verb} {pid}", st.phase.title,
                                    partial(_select_then, main, pid, fn), False)
        yield SystemCommand("Screenshot", "Save an SVG of the screen in the current folder",
                            lambda: self.notify(f"saved {self.save_screenshot()}"), False)


def _select_then(main: MainScreen, phase_id: str, action: Callable[[], None]) -> None:
    """A palette command for a phase other than the selected one: select it, then act on it."""
    main.query_one("#phases", PhaseList).select_id(phase_id)
    main.selected = phase_id
    action()


def _default_sources(project: Any) -> dict[str, Any]:
    cfg = project.config
    return dict(gpu_source=NvmlGpuSource(), disk_source=DiskSource(list(cfg.volumes)),
                shm_source=ShmSource(dump=cfg.shm_dump), host_source=HostSource())


def run_console(project: Any, *, theme: str | None = None, mouse: bool = True, gpu_source: Any = None,
                disk_source: Any = None, shm_source: Any = None, host_source: Any = None,
                screenshot: str | os.PathLike[str] | None = None, screenshot_after: float | None = None,
                size: tuple[int, int] | None = None, read_only: bool = False) -> int:
    """Run the console until the operator quits (phases keep running); the exit code.

    `screenshot` (or $EAGLE3_SCREENSHOT) runs headless, saves an SVG of the screen after
    `screenshot_after` seconds ($EAGLE3_SCREENSHOT_AFTER, default 5) at `size`
    ($EAGLE3_SCREENSHOT_SIZE, default 200x60), and exits."""
    defaults = _default_sources(project)
    sources = dict(gpu_source=gpu_source or defaults["gpu_source"],
                   disk_source=disk_source or defaults["disk_source"],
                   shm_source=shm_source or defaults["shm_source"],
                   host_source=host_source or defaults["host_source"])
    screenshot = screenshot or os.environ.get(SCREENSHOT_ENV) or None
    if screenshot_after is None:
        raw_after = os.environ.get(SCREENSHOT_AFTER_ENV) or "5"
        try:
            screenshot_after = float(raw_after)
        except ValueError:
            screenshot_after = math.nan
        if not 0 <= screenshot_after <= 3600:
            print(f"eagle3: {SCREENSHOT_AFTER_ENV}={raw_after!r} is not a number of seconds from 0 to 3600",
                  file=sys.stderr)
            return 2
    headless = screenshot is not None
    if headless and size is None:
        raw = os.environ.get(SCREENSHOT_SIZE_ENV) or "200x60"
        try:
            cols, rows = (int(x) for x in raw.lower().split("x"))
            size = (cols, rows)
        except ValueError:
            print(f"eagle3: {SCREENSHOT_SIZE_ENV}={raw!r} is not COLSxROWS (e.g. 200x60)", file=sys.stderr)
            return 2
    app = ConsoleApp(project, theme=theme, screenshot=screenshot, screenshot_after=screenshot_after,
                     watchdog=not headless, read_only=read_only, **sources)
    previous = None
    if not headless:
        try:
            previous = signal.signal(signal.SIGHUP, lambda *_: app.call_later(app.exit, 0))
        except ValueError:
            previous = None
    try:
        code = app.run(mouse=mouse, headless=headless, size=size)
    finally:
        if previous is not None:
            signal.signal(signal.SIGHUP, previous)
        close = getattr(sources["gpu_source"], "close", None)
        if callable(close):
            close()
    if app.still_running and not headless:
        print(f"eagle3: console closed; still running: {', '.join(app.still_running)} "
              f"(re-attach: eagle3 console {project.config.path})")
    if app.crash is not None:
        return EXIT_CRASH
    if headless and screenshot:
        print(f"eagle3: screenshot saved to {screenshot}")
    return int(code or 0)
