"""Print a daemon's flags as the Markdown table the README embeds.

tests/test_readme.py checks the README's tables equal this output, so the docs cannot
drift from the code. Run from the repo root: python scripts/flags_table.py
exporter|plugin|simulate|autoscaler
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpufleet.autoscaler.replay.settings import SimulateSettings
from gpufleet.autoscaler.settings import AutoscalerSettings
from gpufleet.exporter.settings import ExporterSettings
from gpufleet.plugin.settings import PluginSettings
from gpufleet.settings import markdown_table

DAEMONS = {
    "exporter": ExporterSettings,
    "plugin": PluginSettings,
    "simulate": SimulateSettings,
    "autoscaler": AutoscalerSettings,
}

if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "exporter"
    if name not in DAEMONS:
        sys.exit(f"usage: python scripts/flags_table.py {'|'.join(DAEMONS)}")
    print(markdown_table(DAEMONS[name]), end="")
