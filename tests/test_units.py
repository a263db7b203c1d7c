"""Unit parsing and formatting: the edge where user strings become SI numbers."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.errors import ClusterSimError, UnitError
from simulator.units import (
    UNITS_TABLE, describe_units, format_bandwidth, format_duration, format_size,
    parse_bandwidth, parse_duration, parse_rate, parse_size, parse_sizes,
)

GOOD = [
    # sizes: bytes, decimal, binary, bits; case folds except b/B
    (parse_size, 512, 512),
    (parse_size, 1024.0, 1024),
    (parse_size, "512", 512),
    (parse_size, "512B", 512),
    (parse_size, "0", 0),
    (parse_size, "1e6", 1_000_000),
    (parse_size, "64MiB", 67_108_864),
    (parse_size, "64 MiB", 67_108_864),
    (parse_size, "  64 MiB ", 67_108_864),
    (parse_size, "64 mib", 67_108_864),
    (parse_size, "1 KiB", 1024),
    (parse_size, "1 kib", 1024),
    (parse_size, "1GiB", 2**30),
    (parse_size, "1.5 GiB", 1_610_612_736),
    (parse_size, "1TiB", 2**40),
    (parse_size, "1KB", 1000),
    (parse_size, "1kB", 1000),
    (parse_size, "1MB", 10**6),
    (parse_size, "1GB", 10**9),
    (parse_size, "1TB", 10**12),
    (parse_size, "1 Kb", 125),
    (parse_size, "1 Mb", 125_000),
    (parse_size, "8 Gb", 10**9),
    # durations
    (parse_duration, 0, 0.0),
    (parse_duration, "0", 0.0),
    (parse_duration, 1.5, 1.5),
    (parse_duration, "2 us", 2e-6),
    (parse_duration, "2us", 2e-6),
    (parse_duration, "3 us", 3e-6),  # exact: not 3 * 1e-6
    (parse_duration, "2\u00b5s", 2e-6),  # micro sign
    (parse_duration, "2 \u03bcs", 2e-6),  # Greek mu
    (parse_duration, "1.5ms", 1.5e-3),
    (parse_duration, "1.5 MS", 1.5e-3),
    (parse_duration, "500 ns", 5e-7),
    (parse_duration, "20ps", 2e-11),
    (parse_duration, "12.3 s", 12.3),
    (parse_duration, "2 min", 120.0),
    (parse_duration, "1 h", 3600.0),
    # bandwidths: b is bits, B is bytes
    (parse_bandwidth, 1e9, 1e9),
    (parse_bandwidth, "1e9", 1e9),
    (parse_bandwidth, "100 Gbps", 12.5e9),
    (parse_bandwidth, "100 gbps", 12.5e9),
    (parse_bandwidth, "100 Gb/s", 12.5e9),
    (parse_bandwidth, "100 Gbit/s", 12.5e9),
    (parse_bandwidth, "400Gbps", 50e9),
    (parse_bandwidth, "800 bps", 100.0),
    (parse_bandwidth, "10 Mbps", 1.25e6),
    (parse_bandwidth, "1 Kbps", 125.0),
    (parse_bandwidth, "1.6 Tbps", 2e11),
    (parse_bandwidth, "25 GB/s", 25e9),
    (parse_bandwidth, "25 GBps", 25e9),
    (parse_bandwidth, "900 GB/s", 900e9),
    (parse_bandwidth, "125 MB/s", 125e6),
    (parse_bandwidth, "1 KB/s", 1e3),
    (parse_bandwidth, "1 TB/s", 1e12),
    (parse_bandwidth, "3 B/s", 3.0),
    (parse_bandwidth, "1 GiB/s", 2.0**30),
    (parse_bandwidth, "1 gib/s", 2.0**30),
    (parse_bandwidth, "1 MiB/s", 2.0**20),
    (parse_bandwidth, "2 TiB/s", 2.0**41),
    # compute rates
    (parse_rate, "19.5 TFLOPS", 19.5e12),
    (parse_rate, "312TFLOP/s", 312e12),
    (parse_rate, "9.3e12", 9.3e12),
    (parse_rate, 9.3e12, 9.3e12),
    (parse_rate, "1.2 PFLOPS", 1.2e15),
    (parse_rate, "1 GFLOPS", 1e9),
    (parse_rate, "989 tflops", 989e12),
]


@pytest.mark.parametrize(("parse", "text", "expected"), GOOD)
def test_parse_good(parse, text, expected):
    result = parse(text)
    assert result == expected
    assert type(result) is type(expected)


BAD = [
    (parse_size, "1XB", "unknown unit 'XB'"),
    (parse_size, "10 Gbps", "bandwidth unit"),
    (parse_size, "10 GB/s", "bandwidth unit"),
    (parse_size, "2 us", "duration unit"),
    (parse_size, "64mb", "ambiguous"),  # megabytes or megabits? refuse
    (parse_size, "64 b", "unknown unit 'b'"),
    (parse_size, "1.5 B", "whole number"),
    (parse_size, "1 Kb/8", "unknown unit"),
    (parse_size, 1.5, "whole number"),
    (parse_size, "-1 MiB", "negative"),
    (parse_size, -1, "negative"),
    (parse_size, True, "bool"),
    (parse_size, None, "NoneType"),
    (parse_size, "", "expected a number"),
    (parse_size, "MiB", "expected a number"),
    (parse_size, "nan", "expected a number"),
    (parse_size, "inf GiB", "expected a number"),
    (parse_size, "1,000", "unknown unit"),
    (parse_size, "1e99999999", "unknown unit"),
    (parse_size, "\u0661 B", "expected a number"),  # Arabic-Indic digit one
    (parse_duration, "1 m", "unknown unit 'm'"),
    (parse_duration, "5 sec", "unknown unit 'sec'"),
    (parse_duration, "64 MiB", "size unit"),
    (parse_duration, "-2 us", "negative"),
    (parse_duration, float("nan"), "finite"),
    (parse_duration, float("inf"), "finite"),
    (parse_duration, "1e999 h", "too large"),
    (parse_bandwidth, "64 MiB", "did you mean 'MiB/s'?"),
    (parse_bandwidth, "100 Gb", "did you mean 'Gb/s'?"),
    (parse_bandwidth, "5 b/s", "unknown unit 'b/s'"),
    (parse_bandwidth, "1 TFLOPS", "rate unit"),
    (parse_bandwidth, "0 Gbps", "positive"),
    (parse_bandwidth, 0, "positive"),
    (parse_bandwidth, "-10 GB/s", "negative"),
    (parse_rate, "10 GB/s", "bandwidth unit"),
    (parse_rate, "0", "positive"),
]


@pytest.mark.parametrize(("parse", "value", "fragment"), BAD)
def test_parse_bad(parse, value, fragment):
    with pytest.raises(UnitError) as info:
        parse(value)
    message = str(info.value)
    assert isinstance(info.value, (ClusterSimError, ValueError))
    quoted = value if isinstance(value, str) else repr(value)
    assert repr(quoted) in message
    assert fragment in message
    assert "accepted" in message


def test_error_message_format():
    with pytest.raises(UnitError) as info:
        parse_size("1XB", what="--size")
    assert str(info.value) == (
        "--size: cannot parse size '1XB': unknown unit 'XB'; accepted: B, KB, MB, GB, TB, "
        "KiB, MiB, GiB, TiB, Kb, Mb, Gb, Tb, or a bare number in bytes")


def test_wrong_kind_names_both_kinds():
    with pytest.raises(UnitError, match=r"^link_bandwidth: cannot parse bandwidth '64 MiB': "
                                        r"'MiB' is a size unit, but a bandwidth was expected"):
        parse_bandwidth("64 MiB", what="link_bandwidth")


def test_allow_zero():
    assert parse_bandwidth("0 Gbps", allow_zero=True) == 0.0
    assert parse_rate(0, allow_zero=True) == 0.0


@pytest.mark.parametrize(("format_", "value", "text"), [
    (format_size, 67_108_864, "64 MiB"),
    (format_size, 2**30, "1 GiB"),
    (format_size, 1536, "1.5 KiB"),
    (format_size, 100, "100 B"),
    (format_size, 0, "0 B"),
    (format_size, 1000, "1000 B"),
    (format_size, 3 * 2**40, "3 TiB"),
    (format_duration, 2e-6, "2 us"),
    (format_duration, 1.5e-3, "1.5 ms"),
    (format_duration, 12.3, "12.3 s"),
    (format_duration, 5e-9, "5 ns"),
    (format_duration, 0, "0 s"),
    (format_duration, 7200, "7200 s"),
    (format_bandwidth, 12.5e9, "12.5 GB/s"),
    (format_bandwidth, 300e9, "300 GB/s"),
    (format_bandwidth, 125e6, "125 MB/s"),
    (format_bandwidth, 2**30, "1.074 GB/s"),  # decimal on output, always
])
def test_format(format_, value, text):
    assert format_(value) == text


@pytest.mark.parametrize("size_bytes", [0, 1, 512, 1023, 1024, 1536, 3 * 2**20, 2**30, 5 * 2**40])
def test_size_round_trip(size_bytes):
    assert parse_size(format_size(size_bytes)) == size_bytes


@pytest.mark.parametrize("time_s", [1e-9, 2e-6, 1.5e-3, 0.25, 12.3, 0.0])
def test_duration_round_trip(time_s):
    assert parse_duration(format_duration(time_s)) == time_s


@pytest.mark.parametrize("bandwidth", [1.0, 125e6, 12.5e9, 300e9, 1.6e12])
def test_bandwidth_round_trip(bandwidth):
    assert parse_bandwidth(format_bandwidth(bandwidth)) == bandwidth


def test_table_is_consistent_with_parsers():
    spellings = [u.spelling for u in UNITS_TABLE]
    assert len(spellings) == len(set(spellings))
    parse = {"size": parse_size, "duration": parse_duration,
             "bandwidth": parse_bandwidth, "rate": parse_rate}
    for unit in UNITS_TABLE:
        assert parse[unit.kind](f"1 {unit.spelling}") == float(unit.factor)
        assert unit.spelling in describe_units(unit.kind)


@given(st.integers(min_value=0, max_value=2**62))
def test_bare_bytes_property(n):
    assert parse_size(f"{n} B") == n
    assert parse_size(n) == n
    assert parse_size(str(n)) == n


@given(st.integers(min_value=2**62 + 1, max_value=2**70))
def test_sizes_beyond_4_eib_are_refused(n):
    with pytest.raises(UnitError, match="too large: sizes go from 0 to 4 EiB"):
        parse_size(n)


@given(st.integers(min_value=0, max_value=1023), st.sampled_from(["KiB", "MiB", "GiB", "TiB"]))
def test_binary_multiple_round_trip(k, prefix):
    size_bytes = parse_size(f"{k} {prefix}")
    assert size_bytes == k * 1024 ** ("KMGT".index(prefix[0]) + 1)
    assert parse_size(format_size(size_bytes)) == size_bytes


@given(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False))
def test_bits_are_one_eighth_of_bytes(x):
    bits = parse_bandwidth(f"{x!r} Gbps")
    byte_rate = parse_bandwidth(f"{x!r} GB/s")
    assert math.isclose(bits * 8, byte_rate, rel_tol=1e-15)


# -- size sweeps (nccl-tests' -b/-e/-f/-i) --------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("64MiB", [64 * 2**20]),
    (512, [512]),
    ("8B:128B", [8, 16, 32, 64, 128]),                       # -b 8 -e 128 -f 2
    ("8B:100B", [8, 16, 32, 64]),                            # the end only when a step lands on it
    ("1KiB:64KiB:x4", [1024, 4096, 16384, 65536]),
    ("1MiB:3MiB:+1MiB", [2**20, 2 * 2**20, 3 * 2**20]),      # -i 1M
    ("0:2B:+1B", [0, 1, 2]),
    ("1KiB, 8B:16B", [1024, 8, 16]),                         # a list keeps its order
])
def test_parse_sizes_expands_like_nccl_tests(text, expected):
    assert parse_sizes(text) == expected


def test_a_doubling_sweep_has_the_count_nccl_tests_prints():
    sizes = parse_sizes("8B:8GiB")
    assert len(sizes) == 31 and sizes[-1] == 8 * 2**30      # 8 B ... 8 GiB: 31 rows
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))


@pytest.mark.parametrize("text, fragment", [
    ("8GiB:8B", "starts above its end"),
    ("8B:8GiB:x1", "whole number >= 2"),
    ("8B:8GiB:x2.5", "whole number >= 2"),
    ("8B:8GiB:y3", "neither xF"),
    ("0:8B", "cannot start at 0"),
    ("1MiB:2MiB:+0", "above 0 bytes"),
    ("1:2:3:4", "3 colons"),
    ("1B:4GiB:+1B", "more than 4096"),
    ("1KiB,,2KiB", "empty item"),
    ("1XB:2MiB", "unknown unit 'XB'"),
])
def test_parse_sizes_refuses_with_the_reason_and_the_grammar(text, fragment):
    with pytest.raises(UnitError) as err:
        parse_sizes(text, what="--size")
    message = str(err.value)
    assert message.startswith("--size: ") and fragment in message
    if "XB" not in text:
        assert "8B:8GiB:x4" in message                      # the accepted forms are listed
