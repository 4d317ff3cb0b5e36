"""LogTail: offsets, bounded memory, carriage-return progress lines, truncation, rotation."""

from __future__ import annotations

import os
import re
import tracemalloc
from pathlib import Path

from console.core.files.logtail import LINE_TRUNCATED, ROTATED, TRUNCATED, LogTail, is_marker


def append(path: Path, data: str | bytes) -> None:
    with open(path, "ab") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def test_missing_file_then_lines_split_across_polls(tmp_path):
    log = tmp_path / "output.log"
    tail = LogTail(log)
    assert tail.poll() == [] and tail.exists is False
    append(log, "starting\nhel")
    assert tail.poll() == ["starting"] and tail.exists
    assert tail.poll() == []
    append(log, "lo world\n")
    assert tail.poll() == ["hello world"]
    assert list(tail.lines) == ["starting", "hello world"] and tail.offset == log.stat().st_size


def test_100k_lines_in_one_go_with_progress_lines_bounded_and_last_line_right(tmp_path):
    log = tmp_path / "output.log"
    parts = []
    for i in range(100_000):
        if i % 1000 == 0:
            parts.append(f"\rstep {i} 10%\rstep {i} 50%\rstep {i} 100%\n")
        else:
            parts.append(f"line {i} loss=0.{i % 97}\n")
    append(log, "".join(parts) + "last line\n")
    tail = LogTail(log, max_lines=5000)
    new = tail.poll()
    assert tail.offset == log.stat().st_size  # everything consumed in one poll
    assert len(tail.lines) == 5000 and len(new) == 5000
    assert tail.lines[-1] == "last line" and tail.lines[-2] == "line 99999 loss=0.89"
    assert "step 99000 100%" in tail.lines and not any("\r" in ln for ln in tail.lines)
    assert tail.lines_seen == 100_001
    assert tail.partial is None


def test_same_stream_in_small_polls_keeps_every_rewritten_line_right(tmp_path):
    log = tmp_path / "output.log"
    data = "".join(f"\r{i} 0%\r{i} 100%\n" if i % 3 == 0 else f"l{i}\n" for i in range(3000)).encode()
    tail = LogTail(log, max_lines=10_000)
    seen: list[str] = []
    for i in range(0, len(data), 97):  # odd size: writes cut lines and segments everywhere
        append(log, data[i : i + 97])
        seen += tail.poll()
    assert seen == [f"{i} 100%" if i % 3 == 0 else f"l{i}" for i in range(3000)]


def test_progress_line_ending_in_carriage_return_is_partial_until_its_newline(tmp_path):
    log = tmp_path / "output.log"
    append(log, "epoch 1\nextract  10%|#   |\r")
    tail = LogTail(log)
    assert tail.poll() == ["epoch 1"]
    assert tail.partial == "extract  10%|#   |"
    append(log, "extract  60%|### |\r")
    assert tail.poll() == [] and tail.partial == "extract  60%|### |"
    append(log, "extract 100%|####|\n")
    assert tail.poll() == ["extract 100%|####|"]
    assert tail.partial is None


def test_tqdm_style_leading_carriage_returns(tmp_path):
    log = tmp_path / "output.log"
    tail = LogTail(log)
    append(log, "\r  0%|          | 0/50")
    tail.poll()
    assert tail.partial == "  0%|          | 0/50"
    append(log, "\r 40%|####      | 20/50")
    tail.poll()
    assert tail.partial == " 40%|####      | 20/50"
    append(log, "\r100%|##########| 50/50\ndone\n")
    assert tail.poll() == ["100%|##########| 50/50", "done"]


def test_endless_progress_bar_without_newline_stays_bounded(tmp_path):
    log = tmp_path / "output.log"
    tail = LogTail(log, max_line_bytes=64)
    for chunk in range(20):
        append(log, "".join(f"\rstep {chunk * 5000 + i}" for i in range(5000)))
        tail.poll(max_bytes=64 << 10)
    assert tail.partial == "step 99999"
    assert len(tail._cur) <= 64 and len(tail._prev) <= 64


def test_crlf_lines_lose_the_carriage_return(tmp_path):
    log = tmp_path / "output.log"
    append(log, b"windows\r\nline two\r\n")
    assert LogTail(log).poll() == ["windows", "line two"]


def test_truncated_file_restarts_from_zero_with_a_marker(tmp_path):
    log = tmp_path / "output.log"
    append(log, "old 1\nold 2\nold 3\n")
    tail = LogTail(log)
    tail.poll()
    log.write_text("new\n")  # same inode, shorter
    assert tail.poll() == [TRUNCATED, "new"]
    assert is_marker(TRUNCATED) and not is_marker("new")


def test_rotated_file_is_read_from_its_start(tmp_path):
    log = tmp_path / "output.log"
    append(log, "first file\n")
    tail = LogTail(log)
    tail.poll()
    os.rename(log, tmp_path / "output.log.1")
    append(log, "second file, already longer than the first one\n")
    assert tail.poll() == [ROTATED, "second file, already longer than the first one"]


def test_big_log_starts_from_its_tail_without_loading_it_whole(tmp_path):
    log = tmp_path / "output.log"
    line = "x" * 90 + "\n"
    with open(log, "w") as f:
        for _ in range(16):
            f.write(line * 20_000)  # ~29 MB
        f.write("".join(f"tail {i}\n" for i in range(300)))
    tail = LogTail(log, max_lines=200)
    tracemalloc.start()
    new = tail.poll(max_bytes=1 << 20)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 << 20  # a few MB, not the 29 MB file
    assert is_marker(new[0]) and "not shown" in new[0] and str(log) in new[0]
    assert new[1:] == [f"tail {i}" for i in range(101, 300)]
    assert len(tail.lines) == 200
    assert tail.skipped_bytes > 28_000_000 and tail.offset == log.stat().st_size


def test_writer_far_ahead_jumps_forward_and_says_so(tmp_path):
    log = tmp_path / "output.log"
    tail = LogTail(log, max_lines=50)
    append(log, "a\n")
    tail.poll()
    append(log, "".join(f"burst {i}\n" for i in range(100_000)))
    new = tail.poll(max_bytes=64 << 10)
    assert is_marker(new[0])
    assert new[-1] == "burst 99999" and len(tail.lines) == 50


def test_long_lines_are_cut_with_a_marker(tmp_path):
    log = tmp_path / "output.log"
    tail = LogTail(log, max_line_bytes=100)
    append(log, "y" * 1000 + "\nshort\n")
    assert tail.poll() == ["y" * 100 + LINE_TRUNCATED, "short"]
    append(log, "z" * 5000)  # an unterminated giant line stays bounded while pending
    tail.poll(max_bytes=1000)
    tail.poll()
    assert len(tail._cur) <= 100
    append(log, "\n")
    assert tail.poll() == ["z" * 100 + LINE_TRUNCATED]


def test_bad_utf8_is_replaced_not_raised(tmp_path):
    log = tmp_path / "output.log"
    append(log, b"ok \xff\xfe bytes\n\xe2\x82\xac\n")
    assert LogTail(log).poll() == ["ok \ufffd\ufffd bytes", "\u20ac"]


def test_search_forward_backward_and_smart_case(tmp_path):
    log = tmp_path / "output.log"
    append(log, "Loading model\nstep 1 loss=3.2\nWARNING: slow disk\nstep 2 loss=2.9\nwarning: again\n")
    tail = LogTail(log)
    tail.poll()
    assert tail.search("loss") == 1
    assert tail.search("loss", start=2) == 3
    assert tail.search("loss", start=2, backwards=True) == 1
    assert tail.search("warning") == 2  # lowercase: case-insensitive
    assert tail.search("WARNING", start=3) is None  # has capitals: exact case
    assert tail.search(re.compile(r"loss=2\.\d")) == 3
    assert tail.search("nothing like this") is None
    assert tail.search("loss=3.2(") is None  # literal text, not a broken regex


def test_appended_gives_absolute_line_numbers(tmp_path):
    log = tmp_path / "output.log"
    tail = LogTail(log, max_lines=3)
    for i in range(10):
        append(log, f"{i}\n")
        tail.poll()
    assert tail.snapshot() == ["7", "8", "9"]
    assert tail.appended - len(tail.lines) == 7
