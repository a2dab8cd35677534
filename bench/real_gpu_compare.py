"""Compare what bench/real_gpu.py's exporters served with what nvidia-smi said in between.

Each point (idle, load0-2, after) has every exporter scraped before and after one
`nvidia-smi -q -x`. A field agrees when nvidia-smi's value lies within the exporter's two
readings, widened by the field's tolerance: the readings are a second or so apart and
nvidia-smi averages some values over its own window. Labels must match exactly, and every
device series of an exporter run with -k must carry the admitted pod.

Run: python3 -m bench.real_gpu_compare DIR  (prints a Markdown table; exit 1 on a mismatch)
"""

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.entry import exit_with

POINTS = ("idle", "load0", "load1", "load2", "after")
EXPORTERS = ("dcp", "default", "compat")
KUBERNETES = ("dcp", "default")

# dcgm-exporter name, its 1.x name, nvidia-smi's XML path, tolerance (absolute).
FIELDS = (
    ("DCGM_FI_DEV_FB_USED", "dcgm_fb_used", "fb_memory_usage/used", 2),
    ("DCGM_FI_DEV_FB_FREE", "dcgm_fb_free", "fb_memory_usage/free", 2),
    ("DCGM_FI_DEV_FB_RESERVED", None, "fb_memory_usage/reserved", 2),
    ("DCGM_FI_DEV_GPU_TEMP", "dcgm_gpu_temp", "temperature/gpu_temp", 2),
    ("DCGM_FI_DEV_MEMORY_TEMP", "dcgm_memory_temp", "temperature/memory_temp", 2),
    ("DCGM_FI_DEV_POWER_USAGE", "dcgm_power_usage", "gpu_power_readings/average_power_draw", 25),
    # Under the load at the 700 W cap the SM clock moves 100+ MHz within a second.
    ("DCGM_FI_DEV_SM_CLOCK", "dcgm_sm_clock", "clocks/sm_clock", 150),
    ("DCGM_FI_DEV_MEM_CLOCK", "dcgm_memory_clock", "clocks/mem_clock", 0),
    ("DCGM_FI_DEV_GPU_UTIL", "dcgm_gpu_utilization", "utilization/gpu_util", 5),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "dcgm_mem_copy_utilization", "utilization/memory_util", 5),
    ("DCGM_FI_DEV_ENC_UTIL", "dcgm_enc_utilization", "utilization/encoder_util", 0),
    ("DCGM_FI_DEV_DEC_UTIL", "dcgm_dec_utilization", "utilization/decoder_util", 0),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "dcgm_pcie_replay_counter", "pci/replay_counter", 0),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", None, "remapped_rows/remapped_row_corr", 0),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", None, "remapped_rows/remapped_row_unc", 0),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", None, "remapped_rows/remapped_row_failure", 0),
)
LABELS = (("UUID", "uuid"), ("pci_bus_id", "pci/pci_bus_id"), ("modelName", "product_name"))


def smi_number(gpu: ET.Element, path: str) -> float | None:
    node = gpu.find(path)
    text = (node.text or "").strip() if node is not None else ""
    if text in ("No", "Yes"):  # remapping failure / pending
        return float(text == "Yes")
    match = re.match(r"-?[0-9.]+", text)
    return float(match.group()) if match else None


def series(path: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def compare(directory: Path) -> tuple[list[str], int]:
    rows = ["| point | exporter | field | before | nvidia-smi | after | agrees |", "|" + "---|" * 7]
    bad = 0
    for point in POINTS:
        xml = directory / f"{point}.xml"
        if not xml.exists():
            continue
        root = ET.parse(xml).getroot()
        gpu = root.find("gpu")
        assert gpu is not None
        driver = root.findtext("driver_version")
        for exporter in EXPORTERS:
            before = series(directory / f"{point}-{exporter}-before.prom")
            after = series(directory / f"{point}-{exporter}-after.prom")
            for name, compat, path, tolerance in FIELDS:
                metric = compat if exporter == "compat" else name
                if metric is None or metric not in before:
                    continue
                want = smi_number(gpu, path)
                (labels, b), (_, a) = before[metric][0], after[metric][0]
                ok = want is not None and min(a, b) - tolerance <= want <= max(a, b) + tolerance
                if exporter != "compat":
                    ok = ok and all(labels.get(k) == gpu.findtext(p) for k, p in LABELS)
                    ok = ok and labels.get("DCGM_FI_DRIVER_VERSION") == driver
                if exporter in KUBERNETES:
                    ok = ok and labels.get("pod") == "llm-0"
                bad += not ok
                rows.append(
                    f"| {point} | {exporter} | {metric} | {b:g} | {want} | {a:g} | "
                    f"{'yes' if ok else '**no**'} |"
                )
    return rows, bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    args = parser.parse_args()
    rows, bad = compare(args.directory)
    print("\n".join(rows))
    print(f"\n{len(rows) - 2} comparisons, {bad} disagree")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    exit_with(main)
