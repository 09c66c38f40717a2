"""Job handlers of the server lifecycle register here."""

from __future__ import annotations
