"""loophound: forensics for runaway AI-agent loops.

The library is the product's core (see `loophound.api`); the `loophound` command is a thin
shell over it. Its functions are imported on first use, so `import loophound` stays cheap:

    import loophound
    loophound.investigate(["logs/"], "incident.html")
    loophound.open(".loophound").events()   # a polars LazyFrame
"""

from __future__ import annotations

from ._version import __version__

_API = ("Evidence", "cost_model", "ingest", "investigate", "open", "scan", "verify",
        "write_report")


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    if name == "errors":
        import importlib

        return importlib.import_module(f"{__name__}.errors")
    raise AttributeError(f"module 'loophound' has no attribute {name!r}")


__all__ = ["__version__", *_API, "errors"]
