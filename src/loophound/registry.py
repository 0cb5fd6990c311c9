"""Import the modules of a registry that are present: formats, detectors, CLI commands.

Each registry names its modules in one tuple; a module that is not there is simply not
registered, while an import error inside a module that is there still surfaces.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def present(package: str, names: tuple[str, ...]) -> list[ModuleType]:
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(f"{package}.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
    return modules
