"""Import every module of a registry: formats, detectors, CLI commands.

Each registry names its modules in one tuple, and each of them must be there: a registered
module that cannot be found is an error (ImportError naming the registry and the module), not
a silent skip that would leave a format unread or a detector unrun without a word. An import
error inside a module surfaces as it is.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def present(package: str, names: tuple[str, ...]) -> list[ModuleType]:
    """The modules `package.name` for each registered name, in the registry's order."""
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(f"{package}.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise  # the module is there; something it imports is not
            raise ImportError(
                f"{package} registers {name!r} but there is no module {package}.{name}: "
                f"restore it or remove {name!r} from the registry",
                name=f"{package}.{name}",
            ) from exc
    return modules
