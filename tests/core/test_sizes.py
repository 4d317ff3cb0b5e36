from __future__ import annotations

import pytest

from console.core.sizes import format_bytes, parse_size


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
