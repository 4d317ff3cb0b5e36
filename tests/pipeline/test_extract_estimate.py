"""`--estimate` gives the bytes a run writes, from the stats and config.json alone."""

from __future__ import annotations

import json
import subprocess
import sys

from pipeline.records.extract_estimate import parse_estimate


def _estimate(xt, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.extract", "--estimate", *args], cwd=xt.REPO,
                          env=xt.cli_env(), capture_output=True, text=True, timeout=60)


def test_estimate_json_follows_the_formula_and_bounds_the_real_store(tiny_target, tiny_data, reference_store, xt):
    proc = _estimate(xt, "--model", str(tiny_target), "--stats", str(tiny_data.stats), "--json")
    assert proc.returncode == 0, proc.stderr
    est = parse_estimate(proc.stdout, "stdout")
    tokens = sum(len(r["input_ids"]) for r in tiny_data.records)
    assert (est.tokens, est.records, est.hidden, est.dtype_bytes) == (tokens, len(tiny_data.records), xt.HIDDEN, 2)
    assert est.hidden_state_bytes == tokens * 4 * xt.HIDDEN * 2
    assert est.bytes == est.hidden_state_bytes + est.overhead_bytes

    # The reference store is fp32: the fp32 estimate must cover it, with no more slack than
    # a block and a header per sample.
    fp32 = parse_estimate(_estimate(xt, "--model", str(tiny_target), "--stats", str(tiny_data.stats),
                                "--dtype", "fp32", "--json").stdout, "stdout")
    actual = sum(p.stat().st_size for p in reference_store.rglob("*") if p.is_file())
    assert actual <= fp32.bytes <= actual + len(tiny_data.records) * (4096 + 512) + 8192


def test_estimate_plain_prints_bytes_and_loads_no_torch(tiny_target, tiny_data, xt):
    code = ("import sys; from pipeline.extract.__main__ import main; rc = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'estimate imported torch'; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, "--estimate", "--model", str(tiny_target),
                           "--stats", str(tiny_data.stats)], cwd=xt.REPO, env=xt.cli_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) > 0


def test_estimate_refuses_bad_inputs_naming_the_file_and_key(tmp_path, tiny_target, tiny_data, xt):
    stats = json.loads(tiny_data.stats.read_text())
    del stats["tokens"]
    bad = tmp_path / "bad.stats.json"
    bad.write_text(json.dumps(stats))
    proc = _estimate(xt, "--model", str(tiny_target), "--stats", str(bad))
    assert proc.returncode == 2 and f"{bad}: tokens: expected a whole number (the key is missing)" in proc.stderr

    bad.write_text(json.dumps({**stats, "tokens": -5}))
    proc = _estimate(xt, "--model", str(tiny_target), "--stats", str(bad))
    assert proc.returncode == 2 and f"{bad}: tokens is -5, a count that cannot be negative" in proc.stderr

    bad.write_text(json.dumps({**stats, "tokens": 5, "version": 999}))
    proc = _estimate(xt, "--model", str(tiny_target), "--stats", str(bad))
    assert proc.returncode == 2 and f"{bad}: a merge stats file of version 999" in proc.stderr

    proc = _estimate(xt, "--model", str(tmp_path), "--stats", str(tiny_data.stats))
    assert proc.returncode == 2 and "config.json" in proc.stderr

    proc = _estimate(xt, "--model", str(tiny_target), "--stats", str(tiny_data.stats), "--dtype", "int3")
    assert proc.returncode == 2 and "--dtype" in proc.stderr


def test_estimate_with_limit_counts_only_the_samples_a_limited_run_extracts(tiny_target, tiny_data, xt):
    base = ["--model", str(tiny_target), "--stats", str(tiny_data.stats), "--json", "--limit", "5"]
    exact = parse_estimate(_estimate(xt, *base, "--data", str(tiny_data.path)).stdout, "stdout")
    first = tiny_data.records[:5]
    assert (exact.records, exact.tokens) == (5, sum(len(r["input_ids"]) for r in first))
    whole = parse_estimate(_estimate(xt, *base[:-2]).stdout, "stdout")
    assert exact.bytes < whole.bytes / 3
    bound = parse_estimate(_estimate(xt, *base).stdout, "stdout")  # no --data: N x the longest sample
    longest = max(len(r["input_ids"]) for r in tiny_data.records)
    assert bound.records == 5 and exact.tokens <= bound.tokens == min(5 * longest, whole.tokens)
    over = parse_estimate(_estimate(xt, *base[:-1], "1000", "--data", str(tiny_data.path)).stdout, "stdout")
    assert (over.records, over.tokens) == (whole.records, whole.tokens)
