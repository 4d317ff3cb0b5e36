"""The SGLang extraction client end to end against the stand-in server (standin_sglang.py):
a real socket, a real dump folder, the real store writer."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from standin_sglang import StandIn, states

from pipeline.dump_protocol import dump_size_bound, request_key
from pipeline.events import iter_events
from pipeline.extract.__main__ import main
from pipeline.store.manifest import read_manifest

HIDDEN = 32
LAYERS = 8
VOCAB = 128


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    """A target folder as the client sees it: config.json and a weights file (its fingerprint)."""
    from safetensors.torch import save_file

    d = tmp_path_factory.mktemp("target") / "tiny-target"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": HIDDEN,
                                               "num_hidden_layers": LAYERS, "vocab_size": VOCAB}))
    save_file({"embed": torch.zeros(VOCAB, HIDDEN)}, str(d / "model.safetensors"))
    return d


def records(n: int, seed: int = 3, length: int | None = None) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = length or rng.randint(3, 48)
        out.append({"id": f"r{i}", "source": "t", "input_ids": [rng.randrange(VOCAB) for _ in range(t)],
                    "loss_mask": [int(rng.random() < 0.6) for _ in range(t)]})
    return out


def write_data(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def run(target: Path, data: Path, out: Path, dumps: Path, url: str, *more: str) -> int:
    return main(["--backend", "sglang", "--server", url, "--dump-dir", str(dumps), "--model", str(target),
                 "--data", str(data), "--out", str(out), "--reserve", "0", "--concurrency", "4", *more])


def leftovers(dumps: Path) -> list[str]:
    """Files in the dump folder other than the server's empty writer lock."""
    return sorted(p.name for p in dumps.iterdir() if not p.name.endswith(".lock"))


def assert_store_is_what_the_server_computed(out: Path, recs: list[dict]) -> None:
    from safetensors.torch import load_file

    done = read_manifest(out)
    assert sorted(done) == list(range(len(recs)))
    assert (out / "manifest.jsonl").exists() and not list(out.glob("manifest.rank*"))
    meta = json.loads((out / "meta.json").read_text())
    assert meta["dtype"] == "bfloat16" and meta["hidden_size"] == HIDDEN and meta["records"] == len(recs)
    for i, r in enumerate(recs):
        t = load_file(out / done[i]["file"])
        final, aux = states(r["input_ids"], HIDDEN)
        assert t["input_ids"].tolist() == r["input_ids"]
        assert t["loss_mask"].tolist() == r["loss_mask"] and t["loss_mask"].dtype == torch.uint8
        assert torch.equal(t["hidden_state"], final), f"sample {i}"
        assert torch.equal(t["aux_hidden_state"], aux), f"sample {i}"
        assert done[i]["id"] == r["id"] and done[i]["tokens"] == len(r["input_ids"])


def test_a_normal_run_stores_what_the_server_computed_and_a_rerun_sends_nothing(
        tmp_path, target, monkeypatch, capsys):
    recs = records(24)
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "shm" / "hs", tmp_path / "store"
    monkeypatch.setenv("EAGLE3_EVENTS", str(tmp_path / "events.jsonl"))
    with StandIn(target, dumps) as server:
        assert run(target, data, out, dumps, server.url) == 0
        assert_store_is_what_the_server_computed(out, recs)
        assert leftovers(dumps) == [], "every dump is deleted once in the store"
        assert server.requests == len(recs)
        assert all(k == request_key(int(k.split("-")[1]), recs[int(k.split("-")[1])]["input_ids"])
                   for k in server.per_key)
        assert "store complete" in capsys.readouterr().out

        assert run(target, data, out, dumps, server.url) == 0
        assert server.requests == len(recs), "a finished store sends nothing on a rerun"
        assert "nothing left to do" in capsys.readouterr().out
    assert main(["--verify", "--out", str(out), "--model", str(target)]) == 0, "the HF backend's own store check"
    events = list(iter_events(tmp_path / "events.jsonl"))
    progress = [e for e in events if e.kind == "progress"]
    assert progress[-1].get("done") == len(recs) and progress[-1].get("tokens") == sum(len(r["input_ids"]) for r in recs)
    names = {e.get("name") for e in events if e.kind == "metric"}
    assert {"dump_folder_bytes", "request_latency_ms"} <= names
    assert any(e.kind == "artifact" for e in events)


def test_an_fp8_store_from_dumps_is_byte_for_byte_what_the_hf_writer_makes(tmp_path, target, monkeypatch, capsys):
    """Dumps streamed through a buffer of a few rows, quantized on the way, give the files
    write_sample(fp8=True) writes from the same states: one fp8 format whichever backend."""
    import pipeline.extract.dumps as dumps_module
    from pipeline.store.sample_file import Sample, write_sample

    monkeypatch.setattr(dumps_module, "CHUNK_BYTES", 400)  # 6 rows of hidden_state, 2 of aux, per piece
    recs = records(10)
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "shm" / "hs", tmp_path / "store"
    with StandIn(target, dumps) as server:
        assert run(target, data, out, dumps, server.url, "--store-dtype", "fp8") == 0
    assert "stored as fp8" in capsys.readouterr().out
    done = read_manifest(out)
    assert json.loads((out / "meta.json").read_text())["store_dtype"] == "float8_e4m3fn"
    for i, r in enumerate(recs):
        final, aux = states(r["input_ids"], HIDDEN)
        sample = Sample(index=i, id=r["id"], input_ids=torch.tensor(r["input_ids"]),
                        loss_mask=torch.tensor(r["loss_mask"], dtype=torch.uint8), hidden_state=final,
                        aux_hidden_state=aux)
        entry = write_sample(tmp_path / "hf", sample, HIDDEN, fp8=True)
        assert (out / done[i]["file"]).read_bytes() == (tmp_path / "hf" / entry["file"]).read_bytes(), f"sample {i}"
        assert done[i]["xxh3"] == entry["xxh3"]
    assert main(["--verify", "--out", str(out), "--model", str(target)]) == 0


def test_a_server_that_dies_mid_run_stops_with_exit_4_and_a_rerun_completes(tmp_path, target, capsys):
    recs = records(30, seed=5)
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "hs", tmp_path / "store"
    with StandIn(target, dumps, die_after=10) as server:
        code = run(target, data, out, dumps, server.url, "--max-failures", "4")
    err = capsys.readouterr().err
    assert code == 4, err
    assert "looks dead" in err and "rerun the same command to resume" in err and "Traceback" not in err
    kept = len(read_manifest(out))
    assert 0 < kept <= 10

    with StandIn(target, dumps) as again:
        assert run(target, data, out, dumps, again.url) == 0
        assert again.requests == len(recs) - kept, "the rerun sends only what is missing"
    assert_store_is_what_the_server_computed(out, recs)


def test_a_dump_folder_at_its_budget_throttles_and_loses_nothing(tmp_path, target, capsys):
    recs = records(16, seed=7, length=40)
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "hs", tmp_path / "store"
    one = dump_size_bound(40, HIDDEN)
    budget = 2 * one + one // 2  # room for two dumps
    with StandIn(target, dumps, budget=budget, wait=10.0, dump_delay=0.01) as server:
        assert run(target, data, out, dumps, server.url, "--dump-budget", str(budget), "--concurrency", "6") == 0
        assert server.errors == 0, "the client held back: the server never had to refuse"
        assert server.max_inflight <= 2, "no more requests in flight than the budget holds dumps"
        assert 0 < server.max_occupancy <= budget
        assert server.requests == len(recs)
    assert_store_is_what_the_server_computed(out, recs)
    assert "dump budget peak" in capsys.readouterr().out


def test_dumps_waiting_for_a_slow_store_writer_keep_their_budget(tmp_path, target, monkeypatch, capsys):
    """--writers 1 on a slow disk: dumps validated but not yet in the store still count against the
    budget, so the client holds requests back and a server with no patience never has to refuse."""
    recs = records(12, seed=23, length=40)
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "hs", tmp_path / "store"
    one = dump_size_bound(40, HIDDEN)
    budget = 3 * one + one // 2  # room for three dumps
    monkeypatch.setenv("EAGLE3_EXTRACT_WRITE_DELAY", "0.05")  # each store write takes 50 ms more
    with StandIn(target, dumps, budget=budget, wait=0.0) as server:
        assert run(target, data, out, dumps, server.url, "--dump-budget", str(budget), "--concurrency", "6",
                   "--writers", "1") == 0
        assert server.errors == 0, "no request was sent while three dumps waited for the writer"
        assert 0 < server.max_occupancy <= budget
        assert server.requests == len(recs)
    assert leftovers(dumps) == []
    assert_store_is_what_the_server_computed(out, recs)
    assert "1 store writers" in capsys.readouterr().out


@pytest.mark.parametrize("writers", ["0", "65"])
def test_a_writer_count_out_of_bounds_is_refused(tmp_path, target, capsys, writers):
    recs = records(2)
    data = write_data(tmp_path / "train.jsonl", recs)
    assert run(target, data, tmp_path / "store", tmp_path / "hs", "http://127.0.0.1:9", "--writers", writers) == 2
    assert "--writers must be" in capsys.readouterr().err


def test_a_sample_too_big_for_the_dump_budget_is_refused_before_sending(tmp_path, target, capsys):
    recs = records(3, length=40)
    data = write_data(tmp_path / "train.jsonl", recs)
    with StandIn(target, tmp_path / "hs") as server:
        assert run(target, data, tmp_path / "store", tmp_path / "hs", server.url, "--dump-budget", "8000") == 2
        assert server.requests == 0
    assert "more than the dump budget" in capsys.readouterr().err


@pytest.mark.parametrize("fault", ["truncate", "nan", "nan-last", "ids"])
def test_a_corrupt_dump_is_rejected_and_retried(tmp_path, target, capsys, monkeypatch, fault):
    from pipeline.extract import dumps as dumps_module

    monkeypatch.setattr(dumps_module, "CHUNK_BYTES", 256)  # many chunks per dump: "nan-last" is in the last
    recs = records(8, seed=11)
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "hs", tmp_path / "store"
    with StandIn(target, dumps, corrupt={3: fault}) as server:
        assert run(target, data, out, dumps, server.url) == 0
        key = request_key(3, recs[3]["input_ids"])
        assert server.per_key[key] == 2, "sent again after the bad dump"
    assert_store_is_what_the_server_computed(out, recs)
    text = capsys.readouterr().out
    assert "rejected dump" in text and "retrying" in text and str(dumps / f"{key}.safetensors") in text


def test_a_nan_in_the_last_chunk_fails_the_sample_with_its_file_named_and_no_store_temp_left(
        tmp_path, target, capsys, monkeypatch):
    """The NaN is found after most of the sample went into the store's temp file: the temp is
    removed, the dump deleted, and with --retries 1 the sample is given up on (the store stays
    incomplete, so nothing else would clean a leftover temp file); a rerun completes."""
    from pipeline.extract import dumps as dumps_module

    monkeypatch.setattr(dumps_module, "CHUNK_BYTES", 256)
    recs = records(6, seed=29, length=40)  # aux of 40 x 96 bf16: 30 chunks of 256 bytes
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "hs", tmp_path / "store"
    with StandIn(target, dumps, corrupt={2: "nan-last"}) as server:
        assert run(target, data, out, dumps, server.url, "--retries", "1") == 1
        key = request_key(2, recs[2]["input_ids"])
        assert server.per_key[key] == 1
        captured = capsys.readouterr()
        assert f"{dumps / key}.safetensors: aux_hidden_state holds NaN or Inf" in captured.err
        assert "1 samples failed 1 attempts each" in captured.err
        assert sorted(read_manifest(out)) == [0, 1, 3, 4, 5]
        assert list(out.glob("rows_*/.*")) == [], "no temp file left in the store"
        assert leftovers(dumps) == [], "the bad dump is deleted"
        assert run(target, data, out, dumps, server.url) == 0
        assert server.per_key[key] == 2
    assert_store_is_what_the_server_computed(out, recs)


def test_a_server_that_writes_no_dumps_is_reported_not_waited_on_forever(tmp_path, target, capsys):
    recs = records(4)
    data = write_data(tmp_path / "train.jsonl", recs)
    with StandIn(target, None) as server:  # answers, but unpatched: no dump folder
        code = run(target, data, tmp_path / "store", tmp_path / "hs", server.url,
                   "--request-timeout", "0.3", "--max-failures", "3", "--retries", "2")
    err = capsys.readouterr().err
    assert code == 4
    assert "no dump appeared" in err and "EAGLE3_DUMP_DIR" in err


def test_a_silent_server_is_reported_as_hung_not_as_unpatched(tmp_path, target, capsys):
    recs = records(4)
    data = write_data(tmp_path / "train.jsonl", recs)
    with StandIn(target, tmp_path / "hs", latency=5.0) as server:  # takes the requests, answers none in time
        code = run(target, data, tmp_path / "store", tmp_path / "hs", server.url,
                   "--request-timeout", "0.3", "--max-failures", "3", "--retries", "2")
    captured = capsys.readouterr()
    err = captured.err
    assert code == 4, err
    last = err.strip().splitlines()[-1]
    assert "is silent: it answered none of them within --request-timeout 0.3 s" in last
    assert "hung or overloaded" in last
    assert "is it patched" not in captured.out + err


def test_a_server_serving_another_model_is_refused(tmp_path, target, capsys):
    data = write_data(tmp_path / "train.jsonl", records(2))
    with StandIn(tmp_path, tmp_path / "hs", hidden=HIDDEN) as server:
        assert run(target, data, tmp_path / "store", tmp_path / "hs", server.url) == 2
        assert server.requests == 0
    err = capsys.readouterr().err
    assert "not the target" in err and str(target) in err


def test_no_server_at_start_is_exit_4_with_what_to_do(tmp_path, target, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = write_data(tmp_path / "train.jsonl", records(2))
    assert run(target, data, tmp_path / "store", tmp_path / "hs", f"http://127.0.0.1:{port}") == 4
    err = capsys.readouterr().err
    assert "connection refused" in err and "pipeline.serve" in err


def test_dumps_left_by_a_killed_run_are_reused_or_swept(tmp_path, target, capsys):
    recs = records(6, seed=13)
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "hs", tmp_path / "store"
    with StandIn(target, dumps) as early:
        early.prefill(request_key(2, recs[2]["input_ids"]), recs[2]["input_ids"])  # killed before moving it
        early.prefill(request_key(4, [1, 2, 3]), [1, 2, 3])  # another dataset's leftover
        (dumps / "e3-5-0000000000000000.error").write_text("old failure\n")
    with StandIn(target, dumps) as server:
        assert run(target, data, out, dumps, server.url) == 0
        assert request_key(2, recs[2]["input_ids"]) not in server.per_key, "the leftover dump was used"
        assert server.requests == len(recs) - 1
    assert leftovers(dumps) == []
    assert_store_is_what_the_server_computed(out, recs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_fast_finiteness_check_finds_every_nan_and_inf(dtype):
    from pipeline.extract.dumps import all_finite

    x = torch.randn(600, 700).to(dtype) * 50  # more than one chunk
    assert all_finite(x)
    assert all_finite(torch.full((4,), torch.finfo(dtype).max, dtype=dtype).neg())
    for bad in (float("nan"), float("inf"), float("-inf")):
        for where in ((0, 0), (599, 699), (300, 5)):
            y = x.clone()
            y[where] = bad
            assert not all_finite(y), (bad, where)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_every_bit_pattern_of_a_nan_or_inf_is_refused_and_every_finite_one_passes(dtype):
    """Both signs, every mantissa a NaN can carry (a server's NaN need not be the canonical one):
    the check decides on the bits, so it is walked over them."""
    from pipeline.extract.dumps import all_finite

    width = torch.finfo(dtype).bits
    itype = {16: torch.int16, 32: torch.int32}[width]
    mantissa_bits = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}[dtype]
    exponent = ((1 << (width - 1)) - 1) ^ ((1 << mantissa_bits) - 1)
    step = 1 if width == 16 else 4099  # every pattern of 16 bits; a stride through the 23-bit mantissas
    for sign in (0, 1 << (width - 1)):
        for m in list(range(0, 1 << mantissa_bits, step)) + [(1 << mantissa_bits) - 1]:
            bits = sign | exponent | m
            x = torch.tensor([bits - (1 << width) if bits >= 1 << (width - 1) else bits], dtype=itype).view(dtype)
            assert not all_finite(x), hex(bits)
            below = sign | (exponent - (1 << mantissa_bits)) | m  # the largest exponent that is finite
            y = torch.tensor([below - (1 << width) if below >= 1 << (width - 1) else below], dtype=itype).view(dtype)
            assert all_finite(y), hex(below)


def test_sigterm_stops_cleanly_and_a_rerun_completes(tmp_path, target, capsys):
    import signal
    import subprocess
    import time

    recs = records(40, seed=17)
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "hs", tmp_path / "store"
    repo = Path(__file__).resolve().parents[2]
    with StandIn(target, dumps, latency=0.05) as server:
        argv = [sys.executable, "-m", "pipeline.extract", "--backend", "sglang", "--server", server.url,
                "--dump-dir", str(dumps), "--model", str(target), "--data", str(data), "--out", str(out),
                "--reserve", "0", "--concurrency", "2"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE3_")}
        proc = subprocess.Popen(argv, cwd=repo, env=dict(env, PYTHONPATH=str(repo)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while server.dumps < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # wait-ok: poll interval of a deadline loop
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert "extract: stopped by SIGTERM; wrote " in err and "rerun the same command to resume" in err, err
        assert "Traceback" not in err
        kept = len(read_manifest(out))
        assert kept < len(recs)
        assert run(target, data, out, dumps, server.url) == 0
    assert_store_is_what_the_server_computed(out, recs)


def test_a_request_that_times_out_is_not_sent_twice_while_the_server_still_runs_it(tmp_path, target, capsys):
    recs = records(3, seed=19)
    data = write_data(tmp_path / "train.jsonl", recs)
    dumps, out = tmp_path / "hs", tmp_path / "store"
    with StandIn(target, dumps, latency=0.6) as server:  # every prefill outlasts the first attempt's timeout
        assert run(target, data, out, dumps, server.url, "--request-timeout", "0.4", "--concurrency", "3",
                   "--max-failures", "10") == 0
        assert all(n == 1 for n in server.per_key.values()), "each sample prefilled once"
        assert server.errors == 0
    assert_store_is_what_the_server_computed(out, recs)
    assert "no answer within" in capsys.readouterr().out
