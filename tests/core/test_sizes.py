from __future__ import annotations

import pytest

from pipeline.sizes import format_bytes, parse_size


@pytest.mark.parametrize("text,expected", [
    ("500GB", 500 * 10**9),
    ("1.5TB", 1_500_000_000_000),
    ("10GiB", 10 * 2**30),
    ("512M", 512 * 2**20),
    ("512Mi", 512 * 2**20),
    ("1024", 1024),
    ("0", 0),
    (1024, 1024),
    ("2 kb", 2000),
    ("1.5TiB", int(1.5 * 2**40)),
    ("100B", 100),
    (" 7 G ", 7 * 2**30),
])
def test_parse_size_accepts_si_iec_and_bare_bytes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["500 GX", "GB", "-5GB", "", "1.2.3GB", "5 bytes", True, None, [1]])
def test_parse_size_rejects_with_a_hint(bad):
    with pytest.raises(ValueError) as e:
        parse_size(bad)
    assert "500GB" in str(e.value)  # the message shows how to write one


def test_format_bytes_is_si_with_one_decimal():
    assert format_bytes(0) == "0 B"
    assert format_bytes(512) == "512 B"
    assert format_bytes(412_300_000_000) == "412.3 GB"
    assert format_bytes(1_200_000_000_000) == "1.2 TB"
    assert format_bytes(999_999) == "1.0 MB"
    assert format_bytes(-2_000_000) == "-2.0 MB"


def test_round_trip_of_a_printed_size():
    assert parse_size(format_bytes(412_300_000_000).replace(" ", "")) == 412_300_000_000


SIZE_TEXTS = ["1.001GB", "1.001 GiB", "0.1KB", "123456789", "7.25TB", "3G", "1e3", ".5MB", "999.95KB"]


@pytest.mark.parametrize("text", SIZE_TEXTS)
def test_one_size_syntax_for_the_console_and_the_pipeline(text):
    """A config's `need: 1.001GB` and extract's `--reserve 1.001GB` mean the same bytes."""
    from console.core.checks import kind
    from pipeline.extract import reserve

    answers = []
    for parse in (parse_size, reserve.parse_size, kind.parse_size):
        try:
            answers.append(parse(text))
        except ValueError:
            answers.append("refused")
    assert len(set(answers)) == 1, answers
    assert parse_size("1.001GB") == 1_001_000_000


def test_printed_sizes_are_the_same_everywhere_and_parse_back_within_their_rounding():
    import random

    from pipeline.extract import reserve

    rng = random.Random(1234)
    for _ in range(5000):
        n = int(10 ** rng.uniform(0, 18))
        shown = format_bytes(n)
        assert reserve.format_bytes(n) == shown
        back = parse_size(shown.replace(" ", ""))
        # one decimal of the printed unit: off by at most half of 0.1 of it
        unit = 1 if shown.endswith(" B") else 1000 ** ("KMGTPE".index(shown.split()[1][0]) + 1)
        assert abs(back - n) <= 0.05 * unit + 0.5, (n, shown, back)


def test_the_panels_compact_sizes_say_what_the_cli_says():
    import random

    from console.ui.render import fmt_bytes

    rng = random.Random(99)
    for _ in range(5000):
        n = int(10 ** rng.uniform(0, 18))
        full = format_bytes(n)
        assert fmt_bytes(n) == (full.replace(" ", "") if full.endswith(" B") else full.replace(" ", "")[:-1])
    assert fmt_bytes(999_960) == "1.0M" and fmt_bytes(999_960, 0) == "1M" and fmt_bytes(None) == "N/A"
