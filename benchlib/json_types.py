"""Names for JSON whose shape nobody here declares.

A record with known keys gets its own ``TypedDict`` in the module that owns it; these aliases
are for what stays free-form: an engine's raw answer, a user's extra request body, a JSON
field's contents of unknown shape. Values are ``object`` rather than ``Any`` so that mypy makes
every use narrow them (``isinstance``) before relying on a type.
"""

from __future__ import annotations

# A JSON object as parsed (``json.loads``) or about to be dumped, keys not declared anywhere.
JsonObject = dict[str, object]
