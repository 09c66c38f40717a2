"""llama-server's command line as specdash launches it (the llama.cpp preset's, filled in), for
the demo seed and for what runs without Django: the engine tests and the GPU check."""

from __future__ import annotations


def llamacpp_argv(
    binary: str,
    model: str,
    *,
    port: int,
    draft: str | None = None,
    draft_n_max: int = 3,
    slots: int = 4,
    context: int = 0,
    threads: int | None = None,
) -> list[str]:
    """A llama-server command line (the preset's, filled in): with `draft`, speculative."""
    argv = [binary, "-m", model]
    if draft is not None:
        argv += ["-md", draft, "--spec-type", "draft-simple"]
        argv += ["--spec-draft-n-max", str(draft_n_max)]
    argv += ["-np", str(slots), "--host", "127.0.0.1", "--port", str(port), "--metrics"]
    if context:
        argv += ["-c", str(context)]  # total: each slot gets context / slots
    if threads is not None:
        argv += ["-t", str(threads), "-tb", str(threads)]
        if draft is not None:
            argv += ["-td", str(threads), "-tbd", str(threads)]
    return argv
