"""No detector imports another: what two detectors share lives in a module both use."""

from __future__ import annotations

import ast
from pathlib import Path

import loophound.detect as detect

DETECT_DIR = Path(detect.__file__).parent


def imported_detect_modules(source: str) -> set[str]:
    """The modules of `loophound.detect` that `source` (a module inside it) imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:  # from .x import y / from . import x
                found.update([node.module.split(".")[0]] if node.module
                             else [a.name for a in node.names])
            elif node.level == 0 and (node.module or "").startswith("loophound.detect."):
                found.add(node.module.split(".")[2])
            elif node.level == 0 and node.module == "loophound.detect":
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names
                         if a.name.startswith("loophound.detect."))
    return found


def test_the_check_sees_every_form_of_import():
    source = ("from .ping_pong import x\nfrom . import rate_spike\nimport loophound.detect.repair_loop\n"
              "from loophound.detect.trigger_cycle import y\nfrom loophound.detect import unusual_actor\n"
              "def f():\n    from .depth_violation import z\n")
    assert imported_detect_modules(source) == {"ping_pong", "rate_spike", "repair_loop",
                                               "trigger_cycle", "unusual_actor", "depth_violation"}


def test_no_detector_imports_another():
    assert len(detect._MODULES) >= 7
    crossings = {}
    for name in detect._MODULES:
        others = imported_detect_modules((DETECT_DIR / f"{name}.py").read_text(encoding="utf-8"))
        crossings[name] = sorted(others & (set(detect._MODULES) - {name}))
    assert crossings == {name: [] for name in detect._MODULES}
