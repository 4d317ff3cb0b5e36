"""The one object the CLI and the UI drive. It turns operator intents (check, run, stop,
verify) into the core's steps in the same order every time, and journals each decision,
so the console and a shell script can never disagree about what happened."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from console.core.checks.context import CheckContext
from console.core.checks.hints import explain
from console.core.checks.registry import run_checks
from console.core.checks.result import CheckResult, redact_results
from console.core.checks.sharing import Sharing, share_of, shares_fit, visible_gpus
from console.core.files.interpreter import locate, missing_message, path_with_interpreter
from console.core.lifecycle.notify import Notifier
from console.core.lifecycle.reread import ConfigChanged, ConfigSource
from console.core.lifecycle.state import LIVE, PhaseStatus, derive_states
from console.core.model.config import Config, Phase
from console.core.records import provenance
from console.core.records.journal import Journal, private_dir, user_name
from console.core.runs import deadline as deadlines
from console.core.runs import manager
from console.core.runs.deadline import Deadline
from console.core.runs.locks import start_lock
from console.core.runs.procs import STOP_GRACE
from console.core.runs.rundir import RunDir
from console.core.text.errors import Eagle3Error, PhaseError
from console.core.text.redaction import redactor_for
from pipeline.sizes import format_bytes


class Blocked(Eagle3Error):
    """A phase's pre-flight checks fail; `results` has all of them, the failing ones blocking."""

    def __init__(self, phase: Phase, results: list[CheckResult]) -> None:
        self.phase = phase
        self.results = results
        bad = [r for r in results if r.blocking]
        lines = "\n".join(f"  x {r.name}: {r.message}" for r in bad)
        super().__init__(f"phase {phase.id} is blocked by {len(bad)} failing check(s):\n{lines}\n"
                         f"{override_hint([r.name for r in bad])}")


def override_hint(names: list[str]) -> str:
    """What to type to go ahead: overriding one of three failing checks starts nothing."""
    if len(names) == 1:
        return f"fix it, or override it: --override {names[0]} --reason TEXT"
    flags = " ".join(f"--override {n}" for n in names)
    return f"fix them, or override all {len(names)} (each with --override NAME): {flags} --reason TEXT"


class NeedsConfirmation(Eagle3Error):
    """A `confirm: true` phase: the operator must type its id after reading `summary`."""

    def __init__(self, phase: Phase, summary: str) -> None:
        self.phase = phase
        self.summary = summary
        super().__init__(f"phase {phase.id} needs confirmation:\n{summary}\nconfirm by typing the phase id ({phase.id})")


NEEDS_CHECK = "needs-done"
PYTHON_CHECK = "interpreter"
SHARES_CHECK = "gpu-memory-shares"  # a start beside others whose commands carry --gpu-memory-share


@dataclass(frozen=True)
class _StaleCheck:
    run_id: str
    why: str | None
    until: float  # time.monotonic() after which the fingerprints are compared again


class Project:
    def __init__(self, config: Config, gpu_reader=None, stale_ttl_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
        self.config = config
        self.redactor = redactor_for(config)
        self.journal = Journal(config.state_dir, self.redactor)
        self.gpu_reader = gpu_reader
        self.stale_ttl_s = stale_ttl_s
        self._stale: dict[str, _StaleCheck] = {}
        self.last_checks: dict[str, list[CheckResult]] = {}  # what the latest check/start saw
        self._lock = threading.Lock()
        self.source: ConfigSource | None = None  # set by `load`: the files `reread` looks at
        self._reread_lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path, overrides: Mapping[str, str] | None = None, **kw) -> Project:  # type: ignore[no-untyped-def]
        source = ConfigSource.of(path, overrides)
        try:
            config = source.load()
        except ConfigChanged as e:
            raise e.cause from None
        project = cls(config, **kw)
        project.source = source
        return project

    def reread(self) -> bool:
        """Load the config again if its file or its overlay changed since it was read
        (two stats when nothing did): True when the project now holds the new one.
        Raises ConfigChanged, keeping the old config, when the files no longer load; the
        same broken files are reported once."""
        source = self.source
        if source is None:
            return False
        with self._reread_lock:
            if not source.changed():
                return False
            self._adopt(source.load())
            return True

    def _adopt(self, config: Config) -> None:
        """Take a new config: its redactor, its journal (the state dir is made of
        variables), and no fingerprints or check results judged under the old one."""
        self.redactor = redactor_for(config)
        if config.state_dir != self.config.state_dir:
            self.journal = Journal(config.state_dir, self.redactor)
        else:
            self.journal.redactor = self.redactor
        self.config = config
        with self._lock:
            self._stale.clear()
        self.last_checks = {}

    # -- reading -----------------------------------------------------------------
    def context(self, phase: Phase | None = None, sharing: Sharing | None = None) -> CheckContext:
        return CheckContext(self.config, phase, gpu_reader=self.gpu_reader, sharing=sharing)

    def run_dir(self, phase_id: str) -> RunDir | None:
        return manager.latest_run(self.config.state_dir, phase_id)

    def statuses(self, checks: Mapping[str, list[CheckResult]] | None = None,
                 probe_services: bool = True) -> list[PhaseStatus]:
        """Every phase's state from the files on disk. Cheap but does I/O: call it off the UI loop."""
        runs: dict[str, tuple[RunDir | None, object]] = {}
        records: dict[str, dict | None] = {}

        def record(pid: str) -> dict | None:
            if pid not in records:
                records[pid] = provenance.read_record(self.config.state_dir, pid)
            return records[pid]

        def run_of(pid: str):  # type: ignore[no-untyped-def]
            if pid not in runs:
                rd = manager.latest_run(self.config.state_dir, pid)
                runs[pid] = (rd, manager.run_status(rd) if rd else None)
            return runs[pid]

        def record_time(pid: str) -> float | None:
            rec = record(pid)
            return float(rec["finished_at"]) if rec and rec.get("finished_at") is not None else None

        def stale_reason(phase: Phase) -> str | None:
            rd, _ = run_of(phase.id)
            key = rd.run_id if rd else ""
            now = time.monotonic()
            with self._lock:
                hit = self._stale.get(phase.id)
            if hit is not None and hit.run_id == key and now < hit.until:
                return hit.why
            rec = record(phase.id)
            why = None
            if rec is not None:
                changed = provenance.changed_paths(rec)
                if rec.get("argv") is not None and list(rec["argv"]) != list(phase.argv):
                    why = "its command changed since it finished (config edited or --set)"
                elif changed:
                    why = "changed since it finished: " + "; ".join(changed[:3])
            # A store of a million files takes seconds to fingerprint: look again no sooner
            # than 20 times that, so a console watching it does not walk it all day.
            took = time.monotonic() - now
            with self._lock:
                self._stale[phase.id] = _StaleCheck(key, why, now + max(self.stale_ttl_s, 20 * took))
            return why

        def service_ready(phase: Phase) -> tuple[bool, str]:
            if not probe_services or not phase.ready:
                return (not phase.ready, "no readiness probe run")
            ok, res = manager.probe_ready(self.config, phase, self.context(phase))
            bad = [r for r in res if r.blocking]
            return (ok, self.redactor.text("; ".join(f"{r.name}: {r.message}" for r in bad)))

        return derive_states(self.config, run_of, stale_reason, record_time, checks, service_ready)

    def status(self, phase_id: str, checks: Mapping[str, list[CheckResult]] | None = None) -> PhaseStatus:
        self.config.phase(phase_id)
        return next(s for s in self.statuses(checks) if s.phase.id == phase_id)

    def running_sessions(self) -> dict[int, str]:
        """Launcher pid (= the phase's session id) -> phase id, for GPU process ownership."""
        out: dict[int, str] = {}
        for ph in self.config.phases:
            rd = manager.latest_run(self.config.state_dir, ph.id)
            if rd is None:
                continue
            rs = manager.run_status(rd)
            if rs.state in LIVE and rs.pid:
                out[rs.pid] = ph.id
        return out

    # -- checks --------------------------------------------------------------------
    def check(self, phase_id: str, overrides: Mapping[str, str] | None = None,
              journal: bool = True, sharing: Sharing | None = None) -> list[CheckResult]:
        """Pre-flight checks of a phase, plus a synthetic one for its `needs`. `sharing`: what
        the phases starting beside it (and those running) will take of the disks and GPUs."""
        phase = self.config.phase(phase_id)
        results = [self._needs_result(phase)]
        for extra in (self._python_result(phase), _shares_result(phase, sharing, overrides or {})):
            if extra is not None:
                results.append(extra)
        results += run_checks(phase.checks, self.context(phase, sharing), overrides=dict(overrides or {}))
        results = redact_results(explain(results, self.config, phase.id), self.redactor)
        for r in results:
            if r.name == NEEDS_CHECK and overrides and NEEDS_CHECK in overrides and r.status == "fail":
                live = [p for p, st in r.evidence.get("missing", {}).items() if st in LIVE]
                if live:  # its outputs are still being written: no reason makes them ready
                    r.message += f"; not overridable while {', '.join(live)} runs"
                else:
                    r.overridden, r.reason = True, overrides[NEEDS_CHECK]
        if journal:
            results += self._journal_checks(phase, results, create=False)
        self.last_checks[phase.id] = results
        return results

    def _journal_checks(self, phase: Phase, results: list[CheckResult], create: bool) -> list[CheckResult]:
        """Record a check in the journal. Only a start creates the state dir: a check on a
        machine the project has never run on leaves no folder behind, and a state dir that
        cannot be created or written becomes one more failing check instead of an error that
        hides the others. Returns that extra result, if any."""
        state = Path(self.config.state_dir)
        if not create and not state.is_dir():
            problem = _uncreatable(state)
            return [_state_dir_result(state, problem)] if problem else []
        try:
            self.journal.append("checks", phase=phase.id, results=[r.to_json() for r in results],
                                passed=not any(r.blocking for r in results))
        except OSError as e:
            if create:
                raise
            return [_state_dir_result(state, f"cannot write its journal: {e.strerror or e}")]
        return []

    def _python_result(self, phase: Phase) -> CheckResult | None:
        """A configured `python:` that names nothing runnable blocks the start with one
        clear line instead of a phase that dies with "No such file"."""
        setting = self.config.python_for(phase)
        if not setting:
            return None
        found = locate(setting)
        if found is None:
            return CheckResult(PYTHON_CHECK, "python", "error", "fail", missing_message(setting),
                               {"python": setting})
        return CheckResult(PYTHON_CHECK, "python", "error", "pass", f"python is {found}",
                           {"python": str(found)})

    def _needs_result(self, phase: Phase) -> CheckResult:
        if not phase.needs:
            return CheckResult(NEEDS_CHECK, "needs", "error", "pass", "needs nothing")
        states = {s.phase.id: s for s in self.statuses(probe_services=True)}
        missing = [states[d] for d in phase.needs if not states[d].satisfies_needs]
        if not missing:
            return CheckResult(NEEDS_CHECK, "needs", "error", "pass",
                               "done first: " + ", ".join(phase.needs), {"needs": list(phase.needs)})
        return CheckResult(
            NEEDS_CHECK, "needs", "error", "fail",
            "not done yet: " + ", ".join(f"{m.phase.id} is {m.state}" for m in missing),
            {"needs": list(phase.needs), "missing": {m.phase.id: m.state for m in missing}},
        )

    def verify(self, phase_id: str) -> list[CheckResult]:
        phase = self.config.phase(phase_id)
        results = redact_results(run_checks(phase.verify, self.context(phase)), self.redactor)
        self.journal.append("verify", phase=phase.id, results=[r.to_json() for r in results],
                            passed=not any(r.status == "fail" for r in results), source="operator")
        return results

    # -- acting ----------------------------------------------------------------------
    def start(self, phase_id: str, overrides: Mapping[str, str] | None = None,
              confirmed: bool = False, run_env: Mapping[str, str] | None = None,
              sharing: Sharing | None = None) -> RunDir:
        """Checks, confirmation, then a detached run. Raises Blocked, NeedsConfirmation or PhaseError."""
        phase = self.config.phase(phase_id)
        overrides = dict(overrides or {})
        known = {NEEDS_CHECK, SHARES_CHECK} | {c.name for c in phase.checks}
        for name in overrides:
            if name not in known:
                raise PhaseError(f"--override {name}: phase {phase.id} has no check named '{name}' "
                                 f"(its checks: {', '.join(sorted(known))})")
        for name, reason in overrides.items():
            if not reason or not reason.strip():
                raise PhaseError(f"--override {name} needs a reason (--reason TEXT); it is recorded in the journal")
        with start_lock(private_dir(Path(self.config.state_dir).absolute())):
            return self._start_locked(phase, overrides, confirmed, run_env, sharing)

    def _start_locked(self, phase: Phase, overrides: dict[str, str], confirmed: bool,
                      run_env: Mapping[str, str] | None, sharing: Sharing | None) -> RunDir:
        """The start itself, under the project's start lock: what the needs check saw (a
        needed phase done, no phase that needs this one running) still holds when the run
        begins, whoever else is starting a phase of this project at the same moment."""
        rs = self._live_status(phase.id)
        if rs is not None:
            raise PhaseError(f"phase {phase.id} is already running (pid {rs.pid}); stop it first or wait")
        users = [ph.id for ph in self.config.phases if phase.id in ph.needs and self._live_status(ph.id) is not None]
        if users:
            raise PhaseError(f"phase {', '.join(users)} needs {phase.id} and is running: running {phase.id} now "
                             f"would change what it reads; stop it first or wait")
        results = self.check(phase.id, overrides=overrides, journal=False, sharing=sharing)
        self._journal_checks(phase, results, create=True)
        if any(r.blocking for r in results):
            bad = ", ".join(r.name for r in results if r.blocking)
            Notifier(self.config, self.journal).fire("blocked", phase.id, "blocked", None, f"{phase.id} blocked: {bad}")
            raise Blocked(phase, results)
        for r in results:
            if r.overridden:
                self.journal.append("override", phase=phase.id, check=r.name, reason=r.reason,
                                    message=r.message, evidence=r.evidence)
        if phase.confirm:
            if not confirmed:
                raise NeedsConfirmation(phase, self.confirmation_summary(phase.id))
            self.journal.append("confirm", phase=phase.id, summary=self.confirmation_summary(phase.id))
        env = {**path_with_interpreter(setting=self.config.python_for(phase)), **dict(run_env or {})}
        return manager.start_run(self.config, phase, run_env=env, journal=self.journal)

    def _live_status(self, phase_id: str):  # type: ignore[no-untyped-def]
        rd = manager.latest_run(self.config.state_dir, phase_id)
        if rd is None:
            return None
        rs = manager.run_status(rd)
        return rs if rs.state in LIVE else None

    def stop(self, phase_id: str, grace: float = STOP_GRACE, run_id: str | None = None,
             deadline: float | None = None) -> bool:
        self.config.phase(phase_id)
        return manager.stop_run(self.config, phase_id, grace=grace, run_id=run_id, deadline=deadline)

    # -- the deadline ------------------------------------------------------------------
    def deadline(self) -> Deadline | None:
        """The project's deadline, passed or not; raises DeadlineError for a file that is not one."""
        return deadlines.read(self.config.state_dir)

    def set_deadline(self, at: float, how: str, grace: float = STOP_GRACE) -> Deadline:
        """Every phase live at `at` gets the stop `s` sends, from its own launcher (so with no
        console or CLI alive); journaled. Replaces the deadline there was."""
        due = Deadline(at=at, grace=grace, set_at=time.time(), by=user_name(), how=how)
        deadlines.write(private_dir(Path(self.config.state_dir).absolute()), due)
        self.journal.append("deadline", at=at, grace=grace, how=how)
        return due

    def clear_deadline(self) -> bool:
        """No deadline any more (journaled); False when there was none."""
        gone = deadlines.clear(self.config.state_dir)
        if gone:
            self.journal.append("deadline_cleared")
        return gone

    def confirmation_summary(self, phase_id: str) -> str:
        """What a destructive phase will touch, in numbers, so the operator reads before typing."""
        phase = self.config.phase(phase_id)
        lines = [f"runs: {' '.join(phase.argv)}"]
        if phase.description:
            lines.append(phase.description)
        for p in phase.deletes:
            lines.append(f"deletes: {p} ({_describe_path(p)})")
        for p in phase.outputs:
            lines.append(f"writes: {p} ({_describe_path(p)})")
        return self.redactor.text("\n".join(lines))


def _shares_result(phase: Phase, sharing: Sharing | None, overrides: Mapping[str, str]) -> CheckResult | None:
    """A start beside phases whose commands carry `--gpu-memory-share` as this one's does: their
    shares of a GPU they both see must add up to one at most. None when there is nothing to add."""
    share = share_of(phase.argv)
    fit = shares_fit(share, visible_gpus(phase.env), sharing) if sharing is not None and share is not None else None
    if fit is None:
        return None
    ok, message, evidence = fit
    reason = overrides.get(SHARES_CHECK)
    return CheckResult(SHARES_CHECK, "gpu_memory_shares", "error", "pass" if ok else "fail", message, evidence,
                       overridden=not ok and bool(reason), reason=reason if not ok else None)


def _uncreatable(path: Path) -> str | None:
    """Why `path` (absent) could not be created by this user, or None when it could."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot be created: {parent} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be created: {parent} is not writable by this user"
    return None


def _state_dir_result(state: Path, problem: str) -> CheckResult:
    return CheckResult(name="state_dir", kind="state_dir", severity="error", status="fail",
                       message=f"state_dir {state} {problem}; set state_dir to a folder this user can write",
                       evidence={"path": str(state)})


def _describe_path(p: Path, limit: int = 200_000) -> str:
    """Size and file count, bounded so a huge store does not hang the dialog."""
    if not p.exists():
        return "does not exist"
    if p.is_file():
        return format_bytes(p.stat().st_size)
    files = total = 0
    for root, _dirs, names in os.walk(p):
        for n in names:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
            except OSError:
                continue
            files += 1
            if files >= limit:
                return f"at least {files} files, {format_bytes(total)} so far"
    return f"{files} files, {format_bytes(total)}"
