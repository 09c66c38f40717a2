from __future__ import annotations

# The simulator's answer to /server_info (and /get_server_info), shaped as SGLang's: what the
# readiness probe and the telemetry read to learn a server's model, limits and speculation, with
# the simulator's own profile beside it.
from typing import TYPE_CHECKING, NotRequired, TypedDict

if TYPE_CHECKING:
    from .app import SimApp


class MemoryUsage(TypedDict):
    kvcache_tokens: int
    token_capacity: int


class InternalState(TypedDict):
    last_gen_throughput: float
    memory_usage: MemoryUsage
    # Speculating: tokens emitted per request-step since start (a lifetime average, as SGLang's).
    avg_spec_accept_length: NotRequired[float]


class ScheduleInfo(TypedDict):
    engine: str
    starts: list[int]
    draft_lengths: list[int]
    cuda_graph_bs: list[int]


class SimulatorInfo(TypedDict):
    profile: str
    t0_ms: float
    k_ms: float
    accept_length: float
    seed: int
    schedule: NotRequired[ScheduleInfo]  # a draft-length schedule, when one is set


class ServerInfo(TypedDict):
    model_path: str
    served_model_name: str
    host: str
    port: int
    tp_size: int
    dp_size: int
    gpu_ids: list[int]
    max_running_requests: int
    max_total_num_tokens: int
    context_length: int
    enable_metrics: bool
    speculative_algorithm: str | None
    version: str
    simulator: SimulatorInfo
    # Speculating:
    speculative_num_steps: NotRequired[int]
    speculative_eagle_topk: NotRequired[int]
    speculative_num_draft_tokens: NotRequired[int]
    speculative_adaptive: NotRequired[bool]
    # Always there; set last, where SGLang has it.
    internal_states: NotRequired[list[InternalState]]


def server_info(app: SimApp, version: str) -> ServerInfo:
    cfg, core, profile = app.config, app.core, app.config.profile
    state = InternalState(
        last_gen_throughput=app.metrics.gen_throughput,
        memory_usage=MemoryUsage(kvcache_tokens=core.kv_used, token_capacity=profile.kv_tokens),
    )
    info = ServerInfo(
        model_path=cfg.model,
        served_model_name=cfg.model,
        host=cfg.host,
        port=cfg.port,
        tp_size=cfg.ranks,
        dp_size=1,
        gpu_ids=list(cfg.gpus),
        max_running_requests=profile.max_running,
        max_total_num_tokens=profile.kv_tokens,
        context_length=cfg.max_model_len,
        enable_metrics=True,
        speculative_algorithm=None,
        version=version,
        simulator=SimulatorInfo(
            profile=profile.name,
            t0_ms=profile.t0_ms,
            k_ms=profile.k_ms,
            accept_length=profile.accept_length,
            seed=cfg.seed,
        ),
    )
    schedule = cfg.speculation
    if schedule is not None:
        info["simulator"]["schedule"] = ScheduleInfo(
            engine=schedule.engine,
            starts=list(schedule.starts),
            draft_lengths=list(schedule.lengths),
            cuda_graph_bs=list(schedule.cuda_graph_bs),
        )
    if core.speculative:
        steps = core.request_steps
        state["avg_spec_accept_length"] = core.generated_tokens / steps if steps else 0.0
        most = profile.spec_steps if schedule is None else schedule.max_draft_length
        info["speculative_algorithm"] = "EAGLE3"
        info["speculative_num_steps"] = most
        info["speculative_eagle_topk"] = 1
        info["speculative_num_draft_tokens"] = most + 1
        info["speculative_adaptive"] = schedule is not None and schedule.engine == "sglang"
    info["internal_states"] = [state]
    return info
