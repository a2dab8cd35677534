"""Print the exporter's flags as the Markdown table the README embeds.

tests/test_readme.py checks the README's table equals this output, so the docs cannot
drift from the code. Run from the repo root: python scripts/flags_table.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpufleet.exporter.settings import ExporterSettings
from gpufleet.settings import markdown_table

if __name__ == "__main__":
    print(markdown_table(ExporterSettings), end="")
