"""The paper's published values (paper_values.json, kept once) and the findings page writer (summary.py)."""
import json
from pathlib import Path

PAPER = json.loads((Path(__file__).with_name("paper_values.json")).read_text())
