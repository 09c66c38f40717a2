"""Serve Plotly's JavaScript bundle from the installed ``plotly`` package.

The package ships ``plotly.min.js``; finding it here keeps the JS version locked to the
Python package in requirements.txt and keeps a 4 MB vendored file out of the repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_PATH = "vendor/plotly.min.js"


def _plotly_bundle() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


class PlotlyFinder(BaseFinder):
    def check(self, **kwargs: Any) -> list[Any]:
        from django.core.checks import Error

        if not _plotly_bundle().exists():
            return [Error("plotly.min.js not found in the plotly package", id="specdash.E001")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        if path == PLOTLY_STATIC_PATH:
            found = str(_plotly_bundle())
            return [found] if find_all else found
        return [] if find_all else None

    def list(self, ignore_patterns: Any) -> Any:
        bundle = _plotly_bundle()
        storage = FileSystemStorage(location=str(bundle.parent))
        storage.prefix = "vendor"  # type: ignore[attr-defined]
        yield bundle.name, storage
