"""The architecture is checked, not just described: the import-linter contracts in
pyproject.toml (layers, detectors independent) must hold, and the README must show them."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    script = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(script), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout and done.stdout.count("KEPT") >= 2


def test_the_readme_architecture_lists_every_layer():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Architecture"):]
    section = section[:section.index("\n## ", 5)]
    for layer in layers:
        for module in layer.split("|"):
            assert f"`{module.strip()}`" in section, module
