"""A merge stopped mid-tokenizing (Ctrl-C, a stop) ends its worker pool before it returns: the
pool's manager thread left running raced the interpreter's exit, which then printed an
`OSError: [Errno 9] Bad file descriptor` traceback under the stage's one interrupted line."""

from __future__ import annotations

import threading
from concurrent.futures import process

import pytest

from pipeline.merge.chunks import Chunk, EncodeSettings
from pipeline.merge.pool import run_chunks


class _Counted:
    def __init__(self) -> None:
        self.done = 0

    def add(self, n: int, final: bool = False) -> None:
        self.done += n


def test_a_merge_stopped_mid_way_leaves_no_pool_thread_for_the_exit_to_race(tmp_path):
    settings = EncodeSettings(tokenizer="unused", method="unused", max_len=8, on_long="drop",
                              parts_dir=str(tmp_path), max_chars=64)

    def chunks():
        yield from (Chunk(i, "s", "s.jsonl", ()) for i in range(6))
        raise KeyboardInterrupt  # as Ctrl-C arrives while the reader reads

    progress = _Counted()
    with pytest.raises(KeyboardInterrupt):
        run_chunks(chunks(), settings, object(), 2, progress)
    assert progress.done == 0  # the chunks were empty: the pool ran them and the stop came after
    left = [t for t in threading.enumerate() if isinstance(t, process._ExecutorManagerThread)]
    assert not left, left
