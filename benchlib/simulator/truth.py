from __future__ import annotations

import json
from typing import IO, NotRequired, TypedDict


class RequestTruth(TypedDict):
    """One served request as the simulated engine saw it (`--truth-log`): the ground truth a
    load generator's records are checked against. Times are wall-clock epoch seconds; `chunks`
    holds [time, tokens] per streamed step."""

    request_id: str
    arrival: float
    admitted: float | None
    first_token: float | None
    chunks: list[list[float]]
    finish: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    error: str | None
    # Reasoning mode: how many of its first tokens were reasoning (chat streams), and its
    # verify steps per phase with the tokens they made.
    reasoning_tokens: NotRequired[int]
    reasoning_verify_steps: NotRequired[int]
    reasoning_step_tokens: NotRequired[int]
    answer_verify_steps: NotRequired[int]
    answer_step_tokens: NotRequired[int]
    cached_tokens: NotRequired[int]  # with the prefix cache on
    sampled: NotRequired[bool]  # temperature > 0
    decode_steps: NotRequired[list[list[int]]]  # under a schedule
    # Under speculation, as the engine counted them.
    spec_verify_steps: NotRequired[int]
    spec_drafted: NotRequired[int]
    spec_accepted: NotRequired[int]


# A draft-length switch of the simulated controller (`--controller-log`); "from" is a keyword,
# hence the functional form.
DraftLengthSwitch = TypedDict(
    "DraftLengthSwitch", {"t": float, "from": int, "to": int, "batch": int}
)


class TruthLog:
    """Per-request ground truth as JSON lines, flushed after every line."""

    def __init__(self, path: str | None) -> None:
        self._file: IO[str] | None = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    def write(self, record: RequestTruth | DraftLengthSwitch) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
