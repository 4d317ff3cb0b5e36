from __future__ import annotations

import pytest

from console.core.figures.expr import ExprError, check_expression, evaluate, evaluate_traced, parse_need, references

STATS = {"stats": {"tokens": 1000, "records": 10, "nested": {"hidden": 4096}, "shards": [3, 5],
                   "name": "merged", "dims": {"h": "4096"}}}


def test_arithmetic_and_dotted_names():
    assert evaluate("stats.tokens * 4 * 4096 * 2 * 1.05", STATS) == pytest.approx(1000 * 4 * 4096 * 2 * 1.05)
    assert evaluate("stats.nested.hidden // 2 + -1", STATS) == 2047
    assert evaluate('stats["tokens"] % 7 + stats.shards[1] ** 2', STATS) == 1000 % 7 + 25
    assert evaluate("max(stats.records, 3) + ceil(1.2) + min(1, 2) + floor(2.7)", STATS) == 10 + 2 + 1 + 2
    assert evaluate("stats.dims.h * 2", STATS) == 8192  # numbers a tool wrote as strings


def test_traced_reports_every_value_read():
    value, used = evaluate_traced("stats.tokens * stats.nested.hidden", STATS)
    assert value == 4_096_000
    assert used == {"stats.tokens": 1000, "stats.nested.hidden": 4096}


@pytest.mark.parametrize("text,construct", [
    ("__import__('os').system('true')", "__import__"),
    ("open('x')", "calling open"),
    ("(lambda: 1)()", "lambda"),
    ("stats.__class__", "__class__"),
    ("stats.tokens if 1 else 2", "if/else"),
    ("[1, 2]", "a list"),
    ("'a' * 3", "only numbers"),
    ("stats.tokens < 3", "comparison"),
    ("max(x=1)", "keyword"),
    ("(1).real", "only on named values"),
    ("stats[stats.tokens]", "constant key"),
    ("not 1", "unary"),
])
def test_forbidden_constructs_are_named(text, construct):
    with pytest.raises(ExprError) as e:
        evaluate(text, STATS)
    assert construct in str(e.value)


@pytest.mark.parametrize("text,why", [
    ("stats.tokns * 2", "has no key 'tokns'"),
    ("stat.tokens", "unknown name 'stat'"),
    ("stats.name * 2", "not a number"),
    ("stats.nested * 2", "an object, not a number"),
    ("stats.tokens.x", "int, it has no 'x'"),
    ("stats.shards[9]", "no index 9"),
    ("1 / 0", "division by zero"),
    ("10 ** 5000", "too large"),
    ("2.0 ** 1000 * 2.0 ** 1000", "finite"),
    ("1 +", "not a valid expression"),
])
def test_evaluation_errors_say_what_is_wrong(text, why):
    with pytest.raises(ExprError) as e:
        evaluate(text, STATS)
    assert why in str(e.value)


def test_missing_key_lists_the_keys_there_are():
    with pytest.raises(ExprError) as e:
        evaluate("stats.tokns", STATS)
    assert "tokens" in str(e.value) and "records" in str(e.value)


def test_parse_need_takes_sizes_numbers_and_expressions():
    assert parse_need("500GB") == 500 * 10**9
    assert parse_need(1024) == 1024
    assert parse_need("stats.tokens * 1.5", STATS) == 1500
    assert parse_need("stats.records / 3", STATS) == 4  # rounded up: a need never undershoots
    with pytest.raises(ExprError, match="negative"):
        parse_need("0 - stats.tokens", STATS)
    with pytest.raises(ExprError):
        parse_need(["500GB"])


def test_static_helpers_for_load_time():
    check_expression("stats.tokens * 2")
    with pytest.raises(ExprError):
        check_expression("stats.tokens; 1")
    assert references("stats.tokens * hidden + max(stats.records, 1)") == ["stats", "hidden"]
