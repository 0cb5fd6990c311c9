"""Fill README.md's generated tables from the code, so the documentation cannot drift:
the event columns (schema.py), the detectors and their parameters (detect/), the guard
types and presets (guards/), and the SQL, report and guards chapters (docs/sql.md,
docs/report.md, docs/guards.md).

    python docs/build_readme.py        # rewrite README.md in place
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from loophound.scan import detector_docs  # noqa: E402
from loophound.schema import COLUMNS, QUARANTINE_COLUMNS  # noqa: E402


def columns(cols) -> str:
    return "\n".join(f"| `{c.name}` | {c.sql_type} | {c.doc} |" for c in cols)


def detectors() -> str:
    out = []
    for name, description, params in detector_docs():
        out.append(f"### `{name}`\n\n{description[0].upper() + description[1:]}.\n")
        out.append("| parameter | default | meaning |\n|---|---|---|")
        out += [f"| `{p}` | `{d}` | {doc} |" for p, d, doc in params]
        out.append("")
    return "\n".join(out).rstrip()


def contract_example() -> str:
    """The findings JSON of `loophound scan sample_logs/`, cut to its first finding."""
    import json
    import tempfile

    from loophound.ingest import ingest
    from loophound.scan import scan_store
    from loophound.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        samples = ROOT / "sample_logs"
        import os

        os.chdir(ROOT)
        ingest([os.path.relpath(samples / "bproxy")], Store(tmp))
        doc = scan_store(Store(tmp)).document
    doc["findings"] = doc["findings"][:1]
    doc["incidents"] = [i for i in doc["incidents"] if doc["findings"][0]["id"] in i["members"]]
    doc["method"]["detectors"] = {"repeated_error": doc["method"]["detectors"]["repeated_error"],
                                  "…": "one table per detector"}
    text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)
    return ("The findings of `loophound scan sample_logs/bproxy/ --json -`, cut to the first "
            "finding and its incident:\n\n```json\n" + text + "\n```")


def guard_types() -> str:
    """The guard types and their parameters (loophound/guards/spec.py)."""
    from loophound.guards.spec import REQUIRED, TYPES, show_value

    out = ["#### Guard types", "",
           "| type | what it does | what a refusal stops | judges (default key) | after |",
           "|---|---|---|---|---|"]
    for t in TYPES.values():
        key = ", ".join(t.key) or "one state for all"
        out.append(f"| `{t.name}` | {t.summary} | {t.blocks} | {', '.join(t.kinds)} ({key}) | "
                   f"{t.source} |")
    out += ["", "| type | parameter | default | meaning |", "|---|---|---|---|"]
    for t in TYPES.values():
        for p in t.params:
            default = "required" if p.default is REQUIRED else (
                "omitted" if p.default is None else f"`{show_value(p, p.default)}`".replace(
                    "`True`", "`true`").replace("`False`", "`false`"))
            out.append(f"| `{t.name}` | `{p.name}` | {default} | {p.doc} |")
    return "\n".join(out)


def guard_presets() -> str:
    """The shipped presets (loophound/guards/presets/*.toml)."""
    from loophound.guards.spec import preset_names, preset_spec

    out = ["| preset | what it is | guards |", "|---|---|---|"]
    for name in preset_names():
        spec = preset_spec(name)
        own = [g.name for g in spec.guards if g.preset == name]
        guards = ", ".join(f"`{g}`" for g in own) or "includes " + ", ".join(
            f"`{p}`" for p in spec.descriptions if p != name)
        out.append(f"| `{name}` | {spec.descriptions.get(name, '')} | {guards} |")
    return "\n".join(out)


def guards_contract() -> str:
    """`loophound guards sample_logs/hooks/ --preset hooks-fix --json -`, cut to one guard."""
    import json
    import os
    import tempfile

    from loophound import api

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(ROOT)
        doc = api.guards(tmp, [os.path.relpath(ROOT / "sample_logs" / "hooks")],
                         presets=["hooks-fix"]).document
    guard = next(g for g in doc["guards"] if g["name"] == "hooks-cycle")
    guard["incidents"] = guard["incidents"][:1] + [{"…": "one row per finding"}]
    doc["guards"] = [guard, {"…": "one object per guard"}]
    text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)
    return ("The replay of `loophound guards sample_logs/hooks/ --preset hooks-fix --json -`, cut "
            "to the guard `hooks-cycle`:\n\n```json\n" + text + "\n```")


def chapter(name: str) -> str:
    path = ROOT / "docs" / name
    return path.read_text().strip() if path.exists() else ""


def summary(name: str) -> str:
    """A chapter up to its `<!-- details ... -->` line (the rest is for docs/ readers only),
    with a link to the whole: the README keeps where things stand, not every run."""
    text = chapter(name)
    head, cut, _ = text.partition("<!-- details")
    return head.rstrip() + (f"\n\nThe whole chapter: [docs/{name}](docs/{name})." if cut else "")


def fill(text: str, marker: str, body: str) -> str:
    """Replace the block after `<!-- MARKER -->` up to `<!-- /MARKER -->` (kept for reruns)."""
    block = f"<!-- {marker} -->\n{body}\n<!-- /{marker} -->"
    pattern = re.compile(rf"<!-- {marker} -->(?:.*?<!-- /{marker} -->)?", re.S)
    return pattern.sub(lambda _: block, text, count=1)


def build(text: str) -> str:
    text = fill(text, "COLUMNS", columns(COLUMNS))
    text = fill(text, "QUARANTINE", columns(QUARANTINE_COLUMNS))
    text = fill(text, "DETECTORS", detectors())
    text = fill(text, "SQL", chapter("sql.md"))
    text = fill(text, "REPORT", chapter("report.md"))
    text = fill(text, "BENCH", summary("benchmarks.md"))
    text = fill(text, "GUARDS", chapter("guards.md"))
    text = fill(text, "GUARD_TYPES", guard_types())
    text = fill(text, "GUARD_PRESETS", guard_presets())
    text = fill(text, "GUARDS_CONTRACT", guards_contract())
    text = fill(text, "CONTRACT", contract_example())
    return text


if __name__ == "__main__":
    readme = ROOT / "README.md"
    readme.write_text(build(readme.read_text()))
