"""Request and response bodies. Output schemas read model attributes (``from_attributes``);
input schemas refuse unknown keys so a typo is a 422, not a silently ignored setting.

One module per resource (``base``: ids, text, the error shape and the page envelope;
``experiments``, ``decisions``, ``jobs``, ``registry``, ``sweeps``); the routers import each
name from its module, and this package re-exports nothing."""
