from __future__ import annotations

# Per-request speculative acceptance, summed per level and per prompt category.
#
# Where the engine reports a request's own figures (llama.cpp's `timings`; SGLang's `meta_info` on
# /generate, or `sglext.spec_tokens_details` on its OpenAI endpoints when the request sets
# `return_spec_tokens_details`, which `apis.engine_extra_body` adds for SGLang),
# the records carry verify steps, drafted and accepted draft tokens. A level's accept length is
# output tokens / verify steps over the requests that report steps (SGLang's own definition,
# completion_tokens / spec_verify_ct, summed before dividing); its acceptance rate is accepted /
# drafted. These are per-level figures from the level's own requests, never lifetime averages.
from collections.abc import Iterable

from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.summary import AcceptanceFigures, LevelAcceptance


def _figures(records: list[RequestRecord]) -> AcceptanceFigures:
    stepped = [r for r in records if r.spec_steps]
    drafted = [r for r in records if r.spec_drafted is not None and r.spec_accepted is not None]
    steps = sum(r.spec_steps or 0 for r in stepped)
    stepped_tokens = sum(r.output_tokens for r in stepped)
    draft_tokens = sum(r.spec_drafted or 0 for r in drafted)
    accepted = sum(r.spec_accepted or 0 for r in drafted)
    return AcceptanceFigures(
        requests=len(records),
        output_tokens=sum(r.output_tokens for r in records),
        reporting=len(stepped) or len(drafted),
        verify_steps=steps,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        accept_length=stepped_tokens / steps if steps else None,
        acceptance_rate=accepted / draft_tokens if draft_tokens else None,
    )


def level_acceptance(records: Iterable[RequestRecord]) -> LevelAcceptance:
    """The successful measured requests' acceptance, overall and `by_category`."""
    ok = [r for r in records if r.ok and not r.warmup]
    by: dict[str, list[RequestRecord]] = {}
    for r in ok:
        by.setdefault(r.category or "unknown", []).append(r)
    by_category = {name: _figures(by[name]) for name in sorted(by)}
    return LevelAcceptance(**_figures(ok), by_category=by_category)
