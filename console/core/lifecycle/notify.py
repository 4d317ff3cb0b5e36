"""Operator notifications: the config's `notify:` commands (config-wide and per phase),
run when a phase `ended`, `failed`, `stalled` or was `blocked`. This is how an operator
wires a chat or mail script.

Who sends what, so that alerts arrive with no console open: the run's launcher sends `ended`
or `failed` once the run is over (after verification and its `run_ended` record) and watches
for `stalled` while the phase runs; a console sends `failed` only for a run whose launcher
died (state lost), and sends `stalled` too when it sees a silence first; `Project.start`
sends `blocked` (the console's `r` and `eagle3 run` alike). An event of a run is sent once
across all these processes: `claim` creates a file with O_CREAT|O_EXCL in the run's `claims/`
folder, and only the process that created it sends.

Each command runs detached (its own session, through this module's small runner), with
no stdin, bounded by its `timeout` (its whole group, and any child that left the group with
setsid, found by the mark in its environment, die at the timeout; only the last 64 KB of its
output is kept), and its outcome (exit code or timeout, last output
line) is journaled as `notify` by the runner itself, so the bound and the record hold even
if the console quits meanwhile. A notifier that fails, hangs or is missing never touches
the phase: the phase is another process that knows nothing of it.

The command gets, as placeholders in its argv and as environment:
  {event} EAGLE3_NOTIFY_EVENT   ended | failed | stalled | blocked
  {phase} EAGLE3_PHASE          the phase id
  {state} EAGLE3_STATE          the phase state (done, failed, stopped, running, blocked)
  {run_id} EAGLE3_RUN_ID        the run id ("" for a blocked start)
  {summary} EAGLE3_SUMMARY      one line for a human
  {config} EAGLE3_CONFIG        the config file
(`{...}` because `${...}` is the config's own interpolation, done at load time.)

Runner exit codes (`python -m console.core.lifecycle.notify`): 0 the command runs (whatever its exit;
the runner goes on in a child of its own, see `_leave_parent`), 2 a bad spec in
$EAGLE3_NOTIFY_SPEC.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from console.core.model.config import MAX_NOTIFY_TIMEOUT
from console.core.records.journal import Journal
from console.core.runs.procs import with_env
from console.core.text.redaction import Redactor

CLAIMS = "claims"
DEFAULT_TIMEOUT = 30.0
MAX_SUMMARY = 500
SPEC_ENV = "EAGLE3_NOTIFY_SPEC"
MARK_ENV = "EAGLE3_NOTIFY_MARK"  # inherited by all the command starts: how a setsid child is found
TAIL_BYTES = 64 * 1024


def placeholders(event: str, phase: str, state: str, run_id: str, summary: str, config: str) -> dict[str, str]:
    summary = " ".join(summary.split())[:MAX_SUMMARY]
    return {"event": event, "phase": phase, "state": state, "run_id": run_id or "",
            "summary": summary, "config": config}


def expand(argv: Sequence[str], values: dict[str, str]) -> list[str]:
    out = []
    for a in argv:
        for k, v in values.items():
            a = a.replace("{" + k + "}", v)
        out.append(a)
    return out


def environment(values: dict[str, str]) -> dict[str, str]:
    return {"EAGLE3_NOTIFY_EVENT": values["event"], "EAGLE3_PHASE": values["phase"],
            "EAGLE3_STATE": values["state"], "EAGLE3_RUN_ID": values["run_id"],
            "EAGLE3_SUMMARY": values["summary"], "EAGLE3_CONFIG": values["config"]}


def claims_dir(state_dir: str | os.PathLike[str], phase_id: str, run_id: str) -> Path:
    """The folder of a run's claims (inside its run directory)."""
    return Path(state_dir) / "runs" / phase_id / run_id / CLAIMS


def claim(state_dir: str | os.PathLike[str], phase_id: str, run_id: str, name: str, note: str = "") -> bool:
    """True for exactly one caller, of all processes, per (run, `name`): the one whose
    O_CREAT|O_EXCL creates `claims/<name>` (with `note` as its text). A claim that cannot be
    written at all (a full disk, a read-only state dir) is granted: an alert sent twice beats
    one never sent."""
    folder = claims_dir(state_dir, phase_id, run_id)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError:
        return True
    try:
        if note:
            os.write(fd, note.encode())
    except OSError:
        pass
    finally:
        os.close(fd)
    return True


def ended_notice(st: Any) -> tuple[str, str]:
    """(event, summary) of a run that ended, from its PhaseStatus, worded alike by every sender."""
    event = "failed" if st.state == "failed" else "ended"
    return event, f"{st.phase.id} {st.state}" + (f": {st.reason}" if st.reason else "")


class Notifier:
    """Fires the matching `notify:` commands of a config. Never raises."""

    def __init__(self, config: Any, journal: Any) -> None:
        self.config = config
        self.journal = journal

    def specs(self, phase_id: str, event: str) -> list[Any]:
        out = [s for s in getattr(self.config, "notify", ()) if event in s.on]
        try:
            phase = self.config.phase(phase_id)
        except Exception:  # noqa: BLE001 - a phase gone from an edited config: config-wide only
            return out
        return out + [s for s in getattr(phase, "notify", ()) if event in s.on]

    def fire(self, event: str, phase_id: str, state: str, run_id: str | None, summary: str,
             claimed: bool = False) -> int:
        """Starts every matching command; how many were started. An event of a run is sent
        once, whichever process (its launcher, a terminal console, a browser tab) fires it
        first: it `claim`s the event and journals `notify_sent`. `claimed`: the caller holds
        a claim already (a StallWatch, for the silence it journaled)."""
        specs = self.specs(phase_id, event)
        if not specs or (run_id and not claimed and not self._claim(event, phase_id, run_id)):
            return 0
        started = 0
        values = placeholders(event, phase_id, state, run_id or "", summary, str(self.config.path))
        for spec in specs:
            argv = expand(spec.argv, values)
            payload = {"argv": argv, "timeout": spec.timeout, "cwd": str(self.config.root),
                       "state_dir": str(self.config.state_dir), "event": event, "phase": phase_id,
                       "run_id": run_id or "", "secret_env": list(getattr(self.config, "secret_env", ()))}
            env = {**os.environ, **environment(values), SPEC_ENV: json.dumps(payload)}
            try:
                subprocess.Popen([sys.executable, "-m", "console.core.lifecycle.notify"], env=env,
                                 cwd=str(self.config.root), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True, close_fds=True)
                started += 1
            except Exception as exc:  # noqa: BLE001 - a notifier never breaks the console
                self._journal(event, phase_id, run_id, argv[:1], error=f"could not start: {exc}")
        return started

    def _claim(self, event: str, phase_id: str, run_id: str) -> bool:
        if not claim(self.config.state_dir, phase_id, run_id, event):
            return False
        try:
            self.journal.append("notify_sent", phase=phase_id, run_id=run_id, on=event)
        except Exception:  # noqa: BLE001 - an unwritable journal must not silence an alert
            pass
        return True

    def _journal(self, event: str, phase_id: str, run_id: str | None, command: list[str], **fields: Any) -> None:
        try:
            self.journal.append("notify", phase=phase_id, run_id=run_id or "", on=event,
                                command=command, **fields)
        except Exception:  # noqa: BLE001
            pass


def _read_tail(stream: Any, tail: bytearray) -> None:
    """Keeps only the last TAIL_BYTES of what the command prints: a chatty notifier (`yes`)
    must cost a few kilobytes, not the training host's memory."""
    while chunk := stream.read1(TAIL_BYTES):
        tail += chunk
        if len(tail) > TAIL_BYTES:
            del tail[:-TAIL_BYTES]


def _kill_marked(pgid: int, mark: str) -> None:
    """SIGKILL the command's group and every process that carries its mark, which is how a
    child that called setsid (left the group) is still found."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    for p in with_env(MARK_ENV, mark):
        try:
            p.kill()
        except Exception:  # noqa: BLE001 - gone meanwhile
            pass


def _run(payload: dict[str, Any]) -> dict[str, Any]:
    """Runs one notifier command in its own process group, at most `timeout` seconds;
    whatever it started that is still alive at the timeout is killed with it."""
    argv = [str(a) for a in payload["argv"]]
    timeout = min(float(payload.get("timeout") or DEFAULT_TIMEOUT), MAX_NOTIFY_TIMEOUT)
    started = time.monotonic()
    mark = f"{os.getpid()}-{time.time_ns()}"
    try:
        env = {k: v for k, v in os.environ.items() if k != SPEC_ENV}
        env[MARK_ENV] = mark
        proc = subprocess.Popen(argv, cwd=payload.get("cwd") or None, stdin=subprocess.DEVNULL, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, process_group=0)
    except OSError as exc:
        return {"error": f"could not start {argv[0]}: {exc.strerror or exc}"}
    tail = bytearray()
    reader = threading.Thread(target=_read_tail, args=(proc.stdout, tail), daemon=True)
    reader.start()
    try:
        result: dict[str, Any] = {"exit_code": proc.wait(timeout=timeout)}
    except subprocess.TimeoutExpired:
        result = {"timed_out": True, "timeout_s": timeout}
    if result.get("timed_out") or with_env(MARK_ENV, mark):
        left = timeout - (time.monotonic() - started)
        while left > 0 and with_env(MARK_ENV, mark):
            time.sleep(min(0.2, left))  # wait-ok: strays get what is left of the timeout
            left = timeout - (time.monotonic() - started)
        _kill_marked(proc.pid, mark)
    proc.wait()
    reader.join(5)
    result["took_s"] = round(time.monotonic() - started, 2)
    text = bytes(tail).decode("utf-8", "replace")
    if result.get("timed_out") and "\n" in text and not text.endswith("\n"):
        text = text.rsplit("\n", 1)[0]  # killed mid-line: its last whole line is what it said
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines:
        result["output"] = lines[-1][:200]
    return result


def _leave_parent() -> None:
    """Go on in a child of our own and let this process exit: the runner is then nobody's
    descendant, so stopping a phase (which ends every descendant of its launcher) never cuts
    off a notification that launcher sent a moment before."""
    if os.fork() > 0:
        os._exit(0)


def main() -> int:
    try:
        payload = json.loads(os.environ[SPEC_ENV])
        argv = list(payload["argv"])
        if not argv:
            raise ValueError("empty argv")
    except (KeyError, ValueError, TypeError) as exc:
        print(f"eagle3 notify: ${SPEC_ENV} is not a notifier spec ({exc})", file=sys.stderr)
        return 2
    _leave_parent()
    result = _run(payload)
    try:
        Journal(Path(payload["state_dir"]), Redactor(payload.get("secret_env") or ())).append(
            "notify", phase=payload.get("phase"), run_id=payload.get("run_id"), on=payload.get("event"),
            command=argv[:1], **result)
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
