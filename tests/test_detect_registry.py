"""Registries (formats, detectors, CLI commands) import every module they name: one that is
missing is an error, never a silent skip."""

from __future__ import annotations

import re
import sys

import pytest

from loophound import detect, formats
from loophound.registry import present


def test_every_registered_module_is_loaded():
    assert len(detect.DETECTORS) == len(detect._MODULES)
    assert len(formats.FORMATS) == len(formats._MODULES)


def test_a_missing_registered_module_raises():
    with pytest.raises(ImportError, match=r"registers 'no_such_detector' but there is no module "
                                          r"loophound\.detect\.no_such_detector"):
        present("loophound.detect", ("repeated_error", "no_such_detector"))


def test_a_missing_import_inside_a_module_surfaces_as_itself(tmp_path, monkeypatch):
    pkg = tmp_path / "lh_registry_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "broken.py").write_text("import lh_registry_probe_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lh_registry_probe", raising=False)
    with pytest.raises(ModuleNotFoundError) as exc:
        present("lh_registry_probe", ("broken",))
    assert exc.value.name == "lh_registry_probe_missing_dependency"


def test_event_kinds_are_the_kinds_the_schema_documents():
    from loophound.schema import COLUMNS
    from loophound.vocabulary import EventKind

    doc = next(c.doc for c in COLUMNS if c.name == "kind")
    doc = re.sub(r"\s*\([^)]*\)", "", doc)  # a kind's explanation, in parentheses
    assert [k.strip() for k in doc.split(",")] == [k.value for k in EventKind]


def test_a_detector_naming_a_kind_that_does_not_exist_fails_at_once():
    import dataclasses

    det = detect.DETECTORS["ping_pong"]
    with pytest.raises(ValueError, match="'room_posts' is not a valid EventKind"):
        dataclasses.replace(det, reads=("message", "room_posts"))
