"""The SGLang client's move of one dump into the store (pipeline/extract/dumps.py and
sample_file.write_parts): a dump is checked by its header and token ids without being mapped, its
states stream through a small reused buffer into the store, and the store file is the very
file the HF backend's write_sample makes of the same sample. A bad dump, found up front or
in its last chunk, is refused with the file's name and leaves nothing in the store."""

from __future__ import annotations

import json
import os
import struct
from itertools import chain
from pathlib import Path

import pytest
import torch

from pipeline.atomic_io import TEMP_SUFFIX
from pipeline.dump_protocol import HEADER_ALLOWANCE, request_key
from pipeline.extract.dumps import BadDump, ChunkBuffer, DumpFolder
from pipeline.patch.sglang_dump import dump_parts
from pipeline.store.layout import relpath
from pipeline.store.sample_file import Sample, write_parts, write_sample

T, H = 37, 24  # odd sizes: no chunk boundary falls on a tensor boundary
IDS = [(i * 31 + 5) % 1000 for i in range(T)]
MASK = [i % 3 != 0 for i in range(T)]
KEY = request_key(4, IDS)


def tensors(ids=IDS) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    states = (torch.randn(len(ids), 4 * H, generator=g) * 40).to(torch.bfloat16)
    return {"input_ids": torch.tensor(ids, dtype=torch.int64), "hidden_state": states[:, :H].contiguous(),
            "aux_hidden_state": states[:, H:].contiguous()}


def write_dump(folder: DumpFolder, x: dict[str, torch.Tensor] | None = None, edit=None, cut: int = 0) -> Path:
    """A dump as the server writes it (its own dump_parts); `edit(header dict)` alters the header
    (its length re-padded), `cut` drops that many bytes off the end."""
    x = x or tensors()
    head, buffers = dump_parts(x, {"rid": KEY, "tokens": str(len(x["input_ids"]))})
    if edit is not None:
        meta = json.loads(head[8:])
        edit(meta)
        js = json.dumps(meta, separators=(",", ":")).encode()
        js += b" " * (-(len(js) + 8) % 8)
        head = struct.pack("<Q", len(js)) + js
    data = b"".join([head, *(bytes(b) for b in buffers)])
    folder.path.mkdir(parents=True, exist_ok=True)
    path = folder.dump_path(KEY)
    path.write_bytes(data[: len(data) - cut])
    return path


def move(folder: DumpFolder, store: Path, buf: ChunkBuffer, index: int = 4) -> dict:
    with folder.open(KEY, IDS, H, "bfloat16") as dump:
        parts = chain((dump.input_ids,), dump.chunks(buf), (bytes(MASK),))
        return write_parts(store, index, "s4", T, H, "bfloat16", parts)


def temp_files(store: Path) -> list[str]:
    return sorted(p.name for p in store.glob(f"rows_*/*{TEMP_SUFFIX}"))


@pytest.mark.parametrize("chunk", [8, 48, 1000, 1 << 20])
def test_a_streamed_dump_is_the_same_file_and_manifest_line_as_write_sample(tmp_path, chunk):
    folder = DumpFolder(tmp_path / "shm")
    x = tensors()
    write_dump(folder, x)
    streamed = move(folder, tmp_path / "streamed", ChunkBuffer(chunk))
    mem = write_sample(tmp_path / "mem", Sample(index=4, id="s4", input_ids=x["input_ids"],
                                                loss_mask=torch.tensor(MASK, dtype=torch.uint8),
                                                hidden_state=x["hidden_state"],
                                                aux_hidden_state=x["aux_hidden_state"]), H)
    assert streamed == mem
    assert (tmp_path / "streamed" / relpath(4)).read_bytes() == (tmp_path / "mem" / relpath(4)).read_bytes()
    assert temp_files(tmp_path / "streamed") == []


def test_a_nan_in_the_last_chunk_of_aux_is_refused_and_leaves_no_temp_file(tmp_path):
    folder = DumpFolder(tmp_path / "shm")
    x = tensors()
    x["aux_hidden_state"][-1, -1] = float("nan")
    path = write_dump(folder, x)
    store = tmp_path / "store"
    with pytest.raises(BadDump, match="aux_hidden_state holds NaN or Inf") as e:
        move(folder, store, ChunkBuffer(64))
    assert str(path) in str(e.value)
    assert not (store / relpath(4)).exists()
    assert temp_files(store) == [], "the partly written temp file is removed"


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_an_inf_or_nan_anywhere_in_the_states_is_refused(tmp_path, bad):
    folder = DumpFolder(tmp_path / "shm")
    for name, where in (("hidden_state", (0, 0)), ("hidden_state", (T - 1, H - 1)), ("aux_hidden_state", (17, 5))):
        x = tensors()
        x[name][where] = bad
        write_dump(folder, x)
        with pytest.raises(BadDump, match=f"{name} holds NaN or Inf"):
            move(folder, tmp_path / "store", ChunkBuffer(40))
        assert temp_files(tmp_path / "store") == []


def test_a_truncated_dump_is_refused_before_anything_is_written(tmp_path):
    folder = DumpFolder(tmp_path / "shm")
    path = write_dump(folder, cut=100)
    with pytest.raises(BadDump, match="truncated") as e:
        folder.open(KEY, IDS, H, "bfloat16")
    assert str(path) in str(e.value)
    path.write_bytes(path.read_bytes()[:20])  # cut inside the header
    with pytest.raises(BadDump, match=f"^{path}: truncated"):
        folder.open(KEY, IDS, H, "bfloat16")


def test_a_dump_cut_while_it_streams_is_refused_and_leaves_no_temp_file(tmp_path):
    folder = DumpFolder(tmp_path / "shm")
    path = write_dump(folder)
    store = tmp_path / "store"
    with folder.open(KEY, IDS, H, "bfloat16") as dump:
        os.truncate(path, path.stat().st_size - 10)
        with pytest.raises(BadDump, match="before the end its header gives") as e:
            write_parts(store, 4, "s4", T, H, "bfloat16",
                        chain((dump.input_ids,), dump.chunks(ChunkBuffer(64)), (bytes(MASK),)))
    assert str(path) in str(e.value)
    assert temp_files(store) == []


def _shift_hidden(meta):
    meta["hidden_state"]["data_offsets"] = [o + 2 for o in meta["hidden_state"]["data_offsets"]]


def _swap_states(meta):
    a, b = meta["hidden_state"]["data_offsets"], meta["aux_hidden_state"]["data_offsets"]
    meta["hidden_state"]["data_offsets"], meta["aux_hidden_state"]["data_offsets"] = b, a


def _offsets_past_the_end(meta):
    meta["aux_hidden_state"]["data_offsets"] = [o + 8 for o in meta["aux_hidden_state"]["data_offsets"]]


@pytest.mark.parametrize("edit, message", [
    (_shift_hidden, "data_offsets overlap or leave a gap"),
    (_swap_states, "has data_offsets"),
    (_offsets_past_the_end, "data_offsets overlap or leave a gap"),
    (lambda m: m["hidden_state"].update(dtype="F16"), "hidden_state is (37, 24) F16, expected (37, 24) BF16"),
    (lambda m: m["aux_hidden_state"].update(shape=[T, 2 * H]), "aux_hidden_state is (37, 48)"),
    (lambda m: m.pop("input_ids"), "holds tensors"),
    (lambda m: m.update(extra={"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}), "holds tensors"),
])
def test_a_dump_whose_header_does_not_match_its_file_or_request_is_refused_naming_it(tmp_path, edit, message):
    folder = DumpFolder(tmp_path / "shm")
    path = write_dump(folder, edit=edit)
    with pytest.raises(BadDump) as e:
        folder.open(KEY, IDS, H, "bfloat16")
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value), str(e.value)


def test_a_dump_with_other_token_ids_is_refused_at_the_first_difference(tmp_path):
    folder = DumpFolder(tmp_path / "shm")
    ids = list(IDS)
    ids[29] += 1
    path = write_dump(folder, tensors(ids))
    with pytest.raises(BadDump, match=f"input_ids differ from the request's at position 29 \\({ids[29]} instead "
                                      f"of {IDS[29]}\\)") as e:
        folder.open(KEY, IDS, H, "bfloat16")
    assert str(path) in str(e.value)


def test_a_header_longer_than_the_bound_is_refused_without_reading_it(tmp_path):
    folder = DumpFolder(tmp_path / "shm")
    path = write_dump(folder, edit=lambda m: m["__metadata__"].update(pad="x" * HEADER_ALLOWANCE))
    with pytest.raises(BadDump, match=f"header takes \\d+ bytes, more than the {HEADER_ALLOWANCE}") as e:
        folder.open(KEY, IDS, H, "bfloat16")
    assert str(path) in str(e.value)
    path.write_bytes(struct.pack("<Q", 2**63) + b"{}")  # a length that would ask for exabytes
    with pytest.raises(BadDump, match="more than the"):
        folder.open(KEY, IDS, H, "bfloat16")


def test_a_header_that_is_not_json_is_refused(tmp_path):
    folder = DumpFolder(tmp_path / "shm")
    path = write_dump(folder)
    data = bytearray(path.read_bytes())
    data[8] = ord("[")
    path.write_bytes(bytes(data))
    with pytest.raises(BadDump, match=f"^{path}: its safetensors header is not a JSON object"):
        folder.open(KEY, IDS, H, "bfloat16")


def test_a_missing_dump_is_file_not_found_and_no_descriptor_leaks(tmp_path):
    folder = DumpFolder(tmp_path / "shm")
    with pytest.raises(FileNotFoundError):
        folder.open(KEY, IDS, H, "bfloat16")
    write_dump(folder, cut=1)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(BadDump):
            folder.open(KEY, IDS, H, "bfloat16")
    assert len(os.listdir("/proc/self/fd")) == before
