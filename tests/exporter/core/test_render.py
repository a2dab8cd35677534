"""Exposition rendering: exact bytes in both formats, escaping, gzip, and real parsers."""

import gzip
import math
import subprocess
import zlib

import pytest
from helpers.tools import require
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gpufleet.exporter.core.fields import MetricType
from gpufleet.exporter.core.render import (
    format_value,
    render,
    render_openmetrics,
    render_text,
)
from gpufleet.exporter.core.series import MetricFamily, Sample

G, C, L = MetricType.GAUGE, MetricType.COUNTER, MetricType.LABEL
GPU0 = (("gpu", "0"), ("UUID", "GPU-0"), ("modelName", "NVIDIA H100 80GB HBM3"))
GPU1 = (("gpu", "1"), ("UUID", "GPU-1"), ("modelName", "NVIDIA H100 80GB HBM3"))


def _family(name: str, type_: MetricType, *samples: Sample, help_: str = "Help.") -> MetricFamily:
    return MetricFamily(name=name, type=type_, help=help_, samples=samples)


FAMILIES = (
    _family(
        "DCGM_FI_DEV_SM_CLOCK",
        G,
        Sample(labels=GPU0, value=1410.0),
        Sample(labels=GPU1, value=345),
        help_="SM clock frequency (in MHz).",
    ),
    _family("DCGM_FI_DRIVER_VERSION", L, Sample(labels=GPU0, value=0)),
    _family(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        C,
        Sample(labels=GPU0, value=123456789012),
        help_="Total energy consumption since boot (in mJ).",
    ),
    _family(
        "gpufleet_xid_errors_total",
        C,
        Sample(labels=(*GPU0, ("xid", "79")), value=2),
        help_="Number of XID events per xid since the exporter started.",
    ),
    _family("gpufleet_ratio", G, Sample(labels=(), value=0.25)),
)

TEXT_SAMPLES = (
    b'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-0",modelName="NVIDIA H100 80GB HBM3"} 1410\n'
    b'DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3"} 345\n'
)


def test_text_format_exact_bytes() -> None:
    assert render_text(FAMILIES) == (
        b"# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n"
        b"# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
        + TEXT_SAMPLES
        + b"# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot "
        b"(in mJ).\n"
        b"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
        b'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-0",'
        b'modelName="NVIDIA H100 80GB HBM3"} 123456789012\n'
        b"# HELP gpufleet_xid_errors_total Number of XID events per xid since the exporter "
        b"started.\n"
        b"# TYPE gpufleet_xid_errors_total counter\n"
        b'gpufleet_xid_errors_total{gpu="0",UUID="GPU-0",modelName="NVIDIA H100 80GB HBM3",'
        b'xid="79"} 2\n'
        b"# HELP gpufleet_ratio Help.\n"
        b"# TYPE gpufleet_ratio gauge\n"
        b"gpufleet_ratio 0.25\n"
    )


def test_openmetrics_exact_bytes() -> None:
    # A counter without _total is declared `unknown` so its samples keep dcgm's exact name;
    # a counter named x_total is declared as family x. Label families never render.
    assert render_openmetrics(FAMILIES) == (
        b"# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n"
        b"# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
        + TEXT_SAMPLES
        + b"# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot "
        b"(in mJ).\n"
        b"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n"
        b'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-0",'
        b'modelName="NVIDIA H100 80GB HBM3"} 123456789012\n'
        b"# HELP gpufleet_xid_errors Number of XID events per xid since the exporter "
        b"started.\n"
        b"# TYPE gpufleet_xid_errors counter\n"
        b'gpufleet_xid_errors_total{gpu="0",UUID="GPU-0",modelName="NVIDIA H100 80GB HBM3",'
        b'xid="79"} 2\n'
        b"# HELP gpufleet_ratio Help.\n"
        b"# TYPE gpufleet_ratio gauge\n"
        b"gpufleet_ratio 0.25\n"
        b"# EOF\n"
    )


def test_empty_exposition() -> None:
    assert (render_text(()), render_openmetrics(())) == (b"", b"# EOF\n")


def test_family_without_samples_keeps_its_metadata() -> None:
    family = _family("x", G)
    assert render_text([family]) == b"# HELP x Help.\n# TYPE x gauge\n"


def test_escaping_label_values_and_help() -> None:
    family = _family(
        "x",
        G,
        Sample(labels=(("modelName", 'A "quoted"\\back\nnew'), ("pod", "plain")), value=1),
        help_='Help with \\ and "quotes"\nand a newline.',
    )
    sample = b'x{modelName="A \\"quoted\\"\\\\back\\nnew",pod="plain"} 1\n'
    assert render_text([family]) == (
        b'# HELP x Help with \\\\ and "quotes"\\nand a newline.\n# TYPE x gauge\n' + sample
    )
    assert render_openmetrics([family]) == (
        b'# HELP x Help with \\\\ and \\"quotes\\"\\nand a newline.\n# TYPE x gauge\n'
        + sample
        + b"# EOF\n"
    )


def test_non_ascii_is_utf8() -> None:
    family = _family("x", G, Sample(labels=(("pod", "café"),), value=1), help_="Temp (°C).")
    assert (
        render_text([family]) == '# HELP x Temp (°C).\n# TYPE x gauge\nx{pod="café"} 1\n'.encode()
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (79.0, "79"),
        (1410, "1410"),
        (0.0, "0"),
        (-0.0, "0"),
        (-3.0, "-3"),
        (True, "1"),
        (0.5, "0.5"),
        (30.982, "30.982"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e-05, "1e-05"),
        (123456789012.0, "123456789012"),
        (2.0**62, "4611686018427387904"),
        (2.0**63, "9.223372036854776e+18"),
        (2**70, "1180591620717411303424"),
        (math.nan, "NaN"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
    ],
    ids=[
        "integral-float",
        "int",
        "zero",
        "negative-zero",
        "negative-integral",
        "bool",
        "half",
        "dcgm-double",
        "shortest-round-trip",
        "small-exponent",
        "energy-mj",
        "large-integral-in-int64",
        "integral-beyond-int64",
        "python-big-int",
        "nan",
        "plus-inf",
        "minus-inf",
    ],
)
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


def test_render_builds_every_encoding_deterministically() -> None:
    exposition = render(FAMILIES, collected_at=1700000000.5, collected_monotonic=42.0)
    assert exposition.text == render_text(FAMILIES)
    assert exposition.openmetrics == render_openmetrics(FAMILIES)
    assert gzip.decompress(exposition.text_gzip) == exposition.text
    assert gzip.decompress(exposition.openmetrics_gzip) == exposition.openmetrics
    assert (exposition.collected_at, exposition.collected_monotonic) == (1700000000.5, 42.0)
    again = render(iter(FAMILIES), collected_at=0.0, collected_monotonic=0.0)
    assert (again.text_gzip, again.openmetrics_gzip) == (
        exposition.text_gzip,
        exposition.openmetrics_gzip,
    )


def test_render_skips_openmetrics_unless_served() -> None:
    exposition = render(
        FAMILIES, collected_at=0.0, collected_monotonic=0.0, text_gzip=False, openmetrics=False
    )
    assert (exposition.text, exposition.text_gzip) == (render_text(FAMILIES), None)
    assert (exposition.openmetrics, exposition.openmetrics_gzip) == (None, None)


def test_shared_label_tuples_render_identically_across_families() -> None:
    # The renderer caches a labels tuple's text by identity; distinct tuples stay distinct.
    shared = (("gpu", "0"),)
    families = [
        _family("a", G, Sample(labels=shared, value=1), Sample(labels=(("gpu", "1"),), value=2)),
        _family("b", G, Sample(labels=shared, value=3)),
    ]
    assert render_text(families) == (
        b'# HELP a Help.\n# TYPE a gauge\na{gpu="0"} 1\na{gpu="1"} 2\n'
        b'# HELP b Help.\n# TYPE b gauge\nb{gpu="0"} 3\n'
    )


def _escaping_families() -> list[MetricFamily]:
    tricky = (*GPU0, ("pod", 'we"ird\\pod\nname'))
    return [
        *FAMILIES,
        _family("DCGM_FI_DEV_GPU_UTIL", G, Sample(labels=tricky, value=math.nan)),
        _family("DCGM_FI_DEV_FB_FREE", G, Sample(labels=GPU0, value=math.inf)),
    ]


def test_openmetrics_parses_with_a_real_parser() -> None:
    text = render_openmetrics(_escaping_families()).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert {name: f.type for name, f in parsed.items()} == {
        "DCGM_FI_DEV_SM_CLOCK": "gauge",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "unknown",
        "gpufleet_xid_errors": "counter",
        "gpufleet_ratio": "gauge",
        "DCGM_FI_DEV_GPU_UTIL": "gauge",
        "DCGM_FI_DEV_FB_FREE": "gauge",
    }
    energy = parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[0]
    assert (energy.name, energy.value) == ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 123456789012)
    assert parsed["gpufleet_xid_errors"].samples[0].name == "gpufleet_xid_errors_total"
    assert parsed["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels["pod"] == 'we"ird\\pod\nname'


@pytest.mark.prometheus
def test_promtool_parses_the_text_exposition() -> None:
    promtool = require("promtool")
    exposition = render_text(_escaping_families())
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=exposition,
        capture_output=True,
        timeout=30,
        check=False,
    )
    # promtool exits 1 with "error while linting: ..." on a parse error and 3 when only lint
    # rules complain. dcgm's names are compatibility facts, so lint complaints about them
    # (counters without _total, camelCase modelName/UUID) are expected; nothing else is.
    report = result.stderr.decode() + result.stdout.decode()
    assert "error while linting" not in report
    assert result.returncode in (0, 3), report
    allowed = ('should have "_total" suffix', "should be written in 'snake_case' not 'camelCase'")
    assert [line for line in report.splitlines() if not line.endswith(allowed)] == []


@pytest.mark.parametrize("fmt", ["text", "openmetrics"])
def test_spliced_gzip_is_one_standard_member(fmt: str) -> None:
    """Bodies are compressed once and spliced into both streams; each stream must still
    be a single, complete gzip member that a strict single-member reader accepts."""
    exposition = render(_escaping_families() * 3, collected_at=0.0, collected_monotonic=0.0)
    plain, packed = getattr(exposition, fmt), getattr(exposition, f"{fmt}_gzip")
    reader = zlib.decompressobj(wbits=31)  # gzip wrapper, exactly one member
    assert reader.decompress(packed) == plain
    assert reader.eof and reader.unused_data == b""
    assert gzip.decompress(packed) == plain


@pytest.mark.parametrize("type_", [MetricType.HISTOGRAM, MetricType.SUMMARY], ids=str)
def test_histogram_and_summary_rows_render_as_dcgm_exporter_declares_them(
    type_: MetricType,
) -> None:
    # dcgm-exporter writes the CSV's type over the one sample; OpenMetrics cannot say that.
    family = _family("x", type_, Sample(labels=(("gpu", "0"),), value=3))
    assert render_text([family]) == f'# HELP x Help.\n# TYPE x {type_}\nx{{gpu="0"}} 3\n'.encode()
    assert render_openmetrics([family]) == (
        b'# HELP x Help.\n# TYPE x unknown\nx{gpu="0"} 3\n# EOF\n'
    )
