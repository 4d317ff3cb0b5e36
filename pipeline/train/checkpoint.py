"""Training checkpoints: complete or absent, never half written, and enough to continue exactly.

    <run>/checkpoints/step_00001200/
        config.json          the drafter's SGLang config (pipeline.drafter.DrafterConfig.to_sglang())
        model.safetensors    the drafter's weights under SGLang's names (pipeline.drafter.EXPORT_KEYS)
        train_state.pt       optimiser, scheduler, step, data position, RNG states, run identity
    <run>/checkpoints/latest a file holding the name of the newest complete checkpoint

A checkpoint is written into a hidden temp folder, every file fsynced, then put in place
by pipeline.output_guard (a rename, or an atomic exchange when the same step is saved again,
so the step's folder never vanishes for a moment; the parent is fsynced); only then is
`latest` replaced (temp + fsync + rename). A kill at any moment leaves `latest` naming a
complete checkpoint. Each step folder carries the `.eagle3-writer` marker of pipeline.train;
a step folder without it (and not a complete checkpoint of an earlier version) is never
replaced. A full disk stops the run with exit 3, naming the volume and the bytes needed, and
leaves no temp folder. `--keep-last K` deletes older ones after the new one is in place.
Export reads `latest_checkpoint(run)` and the two model files with
`pipeline.drafter.load_drafter(folder)`.

A checkpoint is read back as outside input: train_state.pt without running code
(pipeline.torch_state), then checked against its folder (state_check.py); `latest` never
moves back to an earlier step. One train at a time holds a run folder (claim_run_folder).

The run's side lives here too: `keep` checkpoints a step once every rank agrees on the
weights and they are finite; `identity_of` is what a checkpoint remembers of the run (source,
batch plan, TTT length, held-out slice) and `check_resume` refuses a resume that differs in
any of it, naming the flag to change (it would train other batches than the interrupted run);
`restore` puts the optimiser, scheduler, RNG and progress back. A resume with another
--steps/--epochs extends (or shortens) the run: the learning rate follows the new total's
schedule from the resumed step.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import random
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

import torch

from pipeline import output_guard
from pipeline.atomic_io import fsync_dir, write_all, write_bytes_atomic
from pipeline.bounded_read import read_text
from pipeline.drafter.model import CONFIG_FILE, WEIGHTS_FILE, Eagle3Drafter, save_drafter
from pipeline.torch_state import load_state_file
from pipeline.train.errors import BadInput, Stopped, TrainError
from pipeline.train.finite import NotFinite
from pipeline.train.state_check import check_state

if TYPE_CHECKING:  # export reads checkpoints: it never loads the trainer's run
    from _typeshed import ReadableBuffer

    from pipeline.train.dist import Dist
    from pipeline.train.options import Options
    from pipeline.train.run import Run
    from pipeline.train.schedule import BatchPlan

DIR = "checkpoints"
LATEST = "latest"
STATE_FILE = "train_state.pt"
PREFIX = "step_"
WRITER = "pipeline.train"
RUN_LOCK = ".train.lock"
MAX_LATEST_BYTES = 4096


def step_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def folder_of(out: Path, step: int) -> Path:
    """Where step `step`'s checkpoint of the run in `out` is (or would be) kept."""
    return Path(out) / DIR / step_name(step)


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(folder: Path) -> None:
    for p in folder.iterdir():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(folder)


class _Sink(io.RawIOBase):
    """A file torch.save writes through, keeping the OSError of a failed write: torch's zip
    writer swallows it and reports a full disk as `unexpected pos ...`, naming nothing."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, b: ReadableBuffer) -> int:
        data = memoryview(b).cast("B")
        try:
            write_all(self._fd, data)
        except OSError as e:
            self.error = self.error or e
            raise
        return data.nbytes


def _write_state(state: dict, path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    sink = _Sink(fd)
    try:
        torch.save(state, cast(IO[bytes], sink))  # a raw file object: torch only writes to it
        os.fsync(fd)
    except Exception:
        if sink.error is not None:
            raise sink.error from None
        raise
    finally:
        os.close(fd)


def _tensor_bytes(obj: object) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def _is_legacy_checkpoint(folder: Path) -> bool:
    """A complete step folder of a version that wrote no marker: still this writer's."""
    return all((folder / f).is_file() for f in (CONFIG_FILE, WEIGHTS_FILE, STATE_FILE))


def save(run: Path, drafter: Eagle3Drafter, state: dict, keep_last: int | None = None) -> Path:
    """Write checkpoint `state["step"]` atomically, point `latest` at it, prune old ones."""
    root = Path(run) / DIR
    step = state["step"]
    if type(step) is not int or step < 0:
        raise BadInput(f"checkpoint step {step!r}: a step is a whole number from 0 up")
    newest = _latest_step(root)
    if newest is not None and newest > step:
        raise BadInput(f"{root / LATEST} names {step_name(newest)}; saving step {step} would move it back "
                       "(a run continues from its latest checkpoint: pass --resume, or --overwrite to start over)")
    root.mkdir(parents=True, exist_ok=True)
    name = step_name(step)
    final = root / name
    for stale in root.glob(f".{name}.tmp*"):  # a save killed midway
        shutil.rmtree(stale, ignore_errors=True)
    try:
        if final.is_dir() and output_guard.writer_of(final) is None and _is_legacy_checkpoint(final):
            output_guard.mark(final, WRITER)
        output_guard.refuse_foreign(final, WRITER, flag="checkpoint folder")
    except output_guard.BadInput as e:
        raise BadInput(f"{e}; {root} must hold only pipeline.train's checkpoints") from None
    need = _tensor_bytes(drafter.state_dict()) + _tensor_bytes(state) + (1 << 16)
    try:
        with output_guard.staged_folder(final, WRITER, f"saving checkpoint {name}", need) as tmp:
            save_drafter(drafter, tmp)
            _write_state(state, tmp / STATE_FILE)
            _fsync_tree(tmp)
        fsync_dir(root)
        try:
            write_bytes_atomic(root / LATEST, (name + "\n").encode())
        except OSError as e:
            if output_guard.is_disk_full(e):
                raise output_guard.out_of_space(e, f"pointing {LATEST} at {name}", root / LATEST, 1 << 12) from None
            raise
    except output_guard.OutOfSpace as e:
        raise Stopped(f"{e} with --resume ({root / LATEST} still names the last complete checkpoint)") from None
    if keep_last:
        _prune(root, name, keep_last)
    return final


def _prune(root: Path, newest: str, keep_last: int) -> None:
    """Deletes all but the `keep_last` newest checkpoints, once `newest` is in place."""
    older = sorted(p for p in root.glob(f"{PREFIX}*") if p.is_dir() and p.name != newest)
    for old in older[:max(0, len(older) - (keep_last - 1))]:
        shutil.rmtree(old, ignore_errors=True)


RUN_WRITER = "train"
# what a run folder of a version before the marker holds: still train's own
_LEGACY_RUN = {DIR, "summary.json", RUN_LOCK}  # RUN_LOCK: a train killed before it marked the folder


def refuse_run_folder(run: Path, inputs: list[Path]) -> None:
    """A run folder that is, holds or sits inside the store or the target, or an existing folder
    train did not write (no marker of train's, and more than a run of an older version holds),
    is refused (exit 2) before anything is read or written: `--overwrite` deletes `checkpoints/`,
    and a resume would write into somebody else's folder."""
    output_guard.refuse_overlap(run, inputs)
    if os.path.isdir(run) and not os.path.islink(run) and output_guard.writer_of(run) is None:
        names = set(os.listdir(run))
        if names and names <= _LEGACY_RUN:
            return
    output_guard.refuse_foreign(run, RUN_WRITER)


# run folder (resolved) -> the descriptor holding its lock: held until this process ends
_held: dict[str, int] = {}


def claim_run_folder(run: Path) -> None:
    """Marks `run` as train's own (created if need be), so a later run may resume or overwrite
    it, and takes its lock for the rest of this process: two trains on one folder would sweep
    each other's temporary checkpoints and interleave their steps. The lock is the kernel's
    (flock on `<run>/.train.lock`), so a train killed outright leaves none behind; a second
    train is refused (exit 2) naming the folder and the holder's pid."""
    Path(run).mkdir(parents=True, exist_ok=True)
    _lock_run(Path(run))
    if output_guard.writer_of(run) != RUN_WRITER:
        output_guard.mark(run, RUN_WRITER)


def _lock_run(run: Path) -> None:
    key = os.path.realpath(run)
    if key in _held:
        return
    fd = os.open(run / RUN_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    holder = _flock_or_holder(fd)
    if holder is not None:
        os.close(fd)
        raise BadInput(f"{run}: another train is using this run folder (pid {holder}); wait for it to end, "
                       "or stop it, or pass another --out")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[key] = fd


def _flock_or_holder(fd: int) -> str | None:
    """None once this process holds the lock; else the pid its holder wrote in the file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"


def latest_checkpoint(run: Path) -> Path | None:
    """The newest complete checkpoint of a run, or None when there is none."""
    root = Path(run) / DIR
    try:
        name = read_text(root / LATEST, MAX_LATEST_BYTES).strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{root / LATEST}: cannot be read ({e}); point it at an existing step_* folder") from None
    folder = root / name
    if not name.startswith(PREFIX) or "/" in name or not all((folder / f).exists()
                                                              for f in (CONFIG_FILE, WEIGHTS_FILE, STATE_FILE)):
        raise BadInput(f"{root / LATEST}: names {name!r}, which is not a complete checkpoint; "
                       "point it at an existing step_* folder or start a new --out")
    return folder


def _latest_step(root: Path) -> int | None:
    """The step `latest` names, or None when it names none (no checkpoint yet, or damaged)."""
    try:
        name = read_text(root / LATEST, MAX_LATEST_BYTES).strip()
    except (OSError, UnicodeDecodeError):
        return None
    digits = name[len(PREFIX):]
    return int(digits) if name.startswith(PREFIX) and digits.isdigit() and digits.isascii() else None


def load_state(folder: Path) -> dict:
    """A checkpoint's train_state.pt, read without running code and checked against its folder
    (the step its name says, the weights' shapes, the optimiser's tensors): a crafted or damaged
    checkpoint is exit 2 naming the file, not a resume that runs it or dies mid-step."""
    folder = Path(folder)
    state = load_state_file(folder / STATE_FILE, "resume from another checkpoint or pass --overwrite")
    check_state(folder, state, STATE_FILE)
    return state


def identity_of(opts: Options, plan: BatchPlan, source_identity: dict, val: list[int], total: int) -> dict:
    return {"store": source_identity, "plan": asdict(plan), "ttt_length": opts.ttt_length,
            "epochs": opts.epochs, "steps": opts.steps, "total_steps": total,
            "val_samples": len(val), "val_digest": _digest(val)}


def _digest(positions: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, positions)).encode()).hexdigest()[:16]


def check_resume(saved: dict, now: dict, folder: Path) -> None:
    for section in ("store", "plan"):
        keys = set(now[section]) | ({"source"} if section == "store" else set())
        for key in sorted(keys):
            value = now[section].get(key)
            if saved[section].get(key) != value:
                raise BadInput(f"{folder}: was trained with {section} {key}={saved[section].get(key)!r}, this run has "
                               f"{value!r}; resume with the same {'data' if section == 'store' else 'batch'} "
                               "settings (--store or --data, and the batch flags), or pass --overwrite")
    if saved.get("ttt_length") != now["ttt_length"]:
        raise BadInput(f"{folder}: was trained with ttt_length={saved.get('ttt_length')!r}, this run has "
                       f"{now['ttt_length']!r}; resume with the same --ttt-length, or pass --overwrite")
    if saved.get("val_samples", 0) != now["val_samples"] or saved.get("val_digest", now["val_digest"]) != now["val_digest"]:
        raise BadInput(f"{folder}: was trained holding out {saved.get('val_samples', 0)} validation samples, this run "
                       f"holds out {now['val_samples']}{' others' if saved.get('val_samples') == now['val_samples'] else ''}"
                       "; resume with the same --val-share/--val-samples and --seed (--val-samples "
                       f"{saved.get('val_samples', 0)}), or pass --overwrite")


def clear(out: Path, dist: Dist, existing: Path, overwrite: bool) -> None:
    """A fresh run in a folder that holds checkpoints: they go with --overwrite, else exit 2."""
    if not overwrite:
        raise BadInput(f"{out} already holds checkpoints (latest {existing.name}); pass --resume to continue "
                       "it (a larger --steps or --epochs extends it) or --overwrite to start over")
    dist.barrier()
    if dist.rank == 0:
        shutil.rmtree(Path(out) / DIR)
    dist.barrier()


def keep(run: Run, step: int, pending_tokens: torch.Tensor) -> Path | None:
    """Checkpoints step `step` once every rank agrees on the weights and they are finite (rank
    0 saves it; the others wait); its folder on rank 0."""
    dist = run.dist
    if dist.world_size > 1:
        agree = dist.ranks_agree(torch.stack([p.detach().double().sum() for p in run.params]).sum())
        if not agree:
            raise TrainError(f"step {step}: the ranks' weights differ; not checkpointing a diverged model")
        run.log(f"train: step {step}: all {dist.world_size} ranks agree on the weights")
    if not all(bool(torch.isfinite(p.detach()).all()) for p in run.params):
        # The same stop as a non-finite loss (exit 3): the run diverged, the checkpoints kept are good.
        text = (f"step {step}/{run.total}: the drafter's weights are not finite after the optimiser's step; "
                "not checkpointing them; lower --lr or raise --warmup-ratio, or resume from an earlier checkpoint; "
                + last_good(run))
        run.events.message(text, level="error")
        raise NotFinite(text)
    tokens = run.progress.tokens_total + int(dist.all_reduce_sum(pending_tokens.detach().clone()).item())
    path = None
    if dist.rank == 0:
        path = save(run.out, run.drafter, _snapshot(run, step, tokens), keep_last=run.opts.keep_last)
        nbytes = sum(p.stat().st_size for p in path.iterdir())
        run.events.artifact(str(path), bytes=nbytes, step=step)
    dist.barrier()
    return path


def _snapshot(run: Run, step: int, tokens: int) -> dict:
    return {"step": step, "epoch_position": list(run.schedule[step]) if step < run.total else None,
            "optimizer": run.opt.state_dict(), "scheduler": run.sched.state_dict(), "rng": rng_state(),
            "identity": run.identity, "world_size": run.dist.world_size, "history": run.progress.history,
            "val_history": run.progress.val_history, "tokens": tokens, "vocab_note": run.model.vocab_note}


def last_good(run: Run) -> str:
    """Where a run stopped for non-finite numbers goes on from."""
    kept = latest_checkpoint(run.out) if run.dist.rank == 0 else None
    return (f"the last checkpoint, {kept}, holds finite weights: rerun with --resume from it"
            if kept else "no checkpoint was written yet")


def restore(run: Run) -> bool:
    """Puts the checkpoint's optimiser, scheduler, RNG and progress back; False when it is
    already the run's last step (nothing left to train)."""
    state, opt, sched, progress = run.state, run.opt, run.sched, run.progress
    assert state is not None
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    progress.start = int(state["step"])
    progress.history = list(state.get("history") or [])
    progress.val_history = list(state.get("val_history") or [])
    progress.tokens_total = int(state.get("tokens") or 0)
    total, start, log = run.total, progress.start, run.log
    if start >= total:
        log(f"train: {run.existing} is the last step ({start}/{total}); nothing left to train (pass a larger --steps "
            "or --epochs with --resume to extend the run)")
        return False
    if sched.get_last_lr() != [base * run.optimiser.schedule_fn(start) for base in sched.base_lrs]:
        sched.last_epoch = start - 1  # the new total's schedule when the run was extended: step into it
        sched.step()
    saved_total = state["identity"].get("total_steps")
    if saved_total is not None and saved_total != total:
        log(f"train: {'extending' if total > saved_total else 'shortening'} the run from {saved_total} to {total} "
            f"steps; from step {start} the learning rate follows the {total}-step schedule "
            f"({opt.param_groups[0]['lr']:.2e} now)")
    log(f"train: resuming {run.existing} at step {start}/{total}")
    return True
