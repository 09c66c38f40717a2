"""Matrix axes are limited to the engine's declared tuning flags, by type and range; any other
flag needs staff. Held by the service, so the API, the form and its preview agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from benchmarks.experiments.matrix import matrix_preview, matrix_variants
from benchmarks.experiments.models import Experiment
from hosts.models import Engine, ServerProfile
from hosts.presets import TUNING_FLAGS, tuning_flag
from tests.benchmarks.experiments.test_tuning import SIM
from tests.benchmarks.experiments.test_tuning_views import PLAN

pytestmark = pytest.mark.django_db

# What an operator used to make a server write a file of their choosing, bind everywhere and
# run another module (issue 32, finding 1); and a model path, which changes what is served.
FORBIDDEN = [
    ("--log-file", ["/etc/cron.d/x"]),
    ("--host", ["0.0.0.0"]),
    ("-m", ["http.server"]),
    ("--truth-log", ["/tmp/x.jsonl"]),
    ("--speculative-config.model", ["/root/other"]),
]
OUT_OF_RANGE = [
    ("--speculative-num-steps", [1000], "outside 0 to 16"),
    ("--speculative-num-steps", [1.5], "not a whole number"),
    ("--speculative-num-steps", ["3; id"], "not a number"),
    ("--speculative-algorithm", ["EAGLE3 --host"], "not one of EAGLE, EAGLE3"),
    ("--max-running", [0], "outside 1 to 65536"),
]


@pytest.fixture
def staff(roles: None) -> User:
    return User.objects.create_superuser("admin", password="admin-pass-123")


@pytest.fixture
def base(make_profile: Callable[..., ServerProfile]) -> ServerProfile:
    return make_profile(name="Sim", launch_argv=SIM, speculative=True)


def _axes_text(flag: str, values: list[Any]) -> str:
    return f"{flag} {', '.join(str(v) for v in values)}"


@pytest.mark.parametrize("preview", [True, False], ids=["preview", "launch"])
@pytest.mark.parametrize(("flag", "values"), FORBIDDEN[:3])
def test_an_operator_cannot_set_an_undeclared_flag_through_the_form_or_its_preview(
    client: Client,
    operator: User,
    base: ServerProfile,
    flag: str,
    values: list[Any],
    preview: bool,
) -> None:
    client.force_login(operator)
    data = {**PLAN, "base": base.pk, "axes": _axes_text(flag, values)}
    if preview:
        data["preview"] = "1"
    response = client.post("/experiments/matrix/", data)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'data-testid="error-axes"' in html and "not a tuning flag" in html
    assert 'data-testid="matrix-variant"' not in html  # nothing previewed
    assert ServerProfile.objects.count() == 1 and not Experiment.objects.exists()


def test_staff_may_preview_and_launch_any_flag_through_the_form(
    client: Client, staff: User, base: ServerProfile
) -> None:
    client.force_login(staff)
    data = {**PLAN, "base": base.pk, "axes": "--host 0.0.0.0"}
    response = client.post("/experiments/matrix/", {**data, "preview": "1"})
    assert response.status_code == 200
    assert response.content.decode().count('data-testid="matrix-variant"') == 2  # off, host
    assert client.post("/experiments/matrix/", data).status_code == 302
    variant = ServerProfile.objects.get(name="Sim [host=0.0.0.0]")
    assert variant.launch_argv == [*SIM, "--host", "0.0.0.0"]


def test_the_service_holds_the_rule_whatever_calls_it(base: ServerProfile, staff: User) -> None:
    for user in (None, User.objects.create_user("staff-no-perm", is_staff=True)):
        with pytest.raises(ValidationError, match="not a tuning flag"):
            matrix_preview(base=base, axes={"-m": ["os"]}, user=user)
        with pytest.raises(ValidationError, match="not a tuning flag"):
            matrix_variants(base=base, axes={"-m": ["os"]}, user=user)
    assert ServerProfile.objects.count() == 1
    (variant,) = matrix_variants(base=base, axes={"-m": ["os"]}, user=staff)
    assert variant.launch_argv[1:3] == ["-m", "os"]


def test_declared_flags_accept_their_range_and_every_engine_declares_some() -> None:
    assert set(TUNING_FLAGS) == set(Engine.values)
    for engine in ("sglang", "vllm", "llamacpp", "simulator"):
        assert TUNING_FLAGS[engine], engine
    assert TUNING_FLAGS["custom"] == ()
    steps = tuning_flag("sglang", "--speculative-num-steps")
    assert steps is not None and steps.problem(0) == steps.problem(16) == ""
    assert steps.problem(True) != ""
    memory = tuning_flag("vllm", "--gpu-memory-utilization")
    assert memory is not None and memory.problem(0.9) == "" and memory.problem(1.5) != ""
    assert tuning_flag("llamacpp", "--speculative-num-steps") is None
    assert tuning_flag("sglang", "--host") is None


def test_an_operator_may_vary_declared_flags_of_each_engine(
    make_profile: Callable[..., ServerProfile], operator: User
) -> None:
    bases = {
        Engine.SGLANG: ["python3", "-m", "sglang.launch_server", "--mem-fraction-static", "0.8"],
        Engine.VLLM: ["vllm", "serve", "m", "--speculative-config", '{"method":"eagle3"}'],
        Engine.LLAMACPP: ["llama-server", "-m", "m.gguf", "-np", "4"],
    }
    axes: dict[str, dict[str, list[Any]]] = {
        Engine.SGLANG: {"--mem-fraction-static": [0.7, 0.85], "--max-running-requests": [8]},
        Engine.VLLM: {"--speculative-config.num_speculative_tokens": [1, 3]},
        Engine.LLAMACPP: {"-np": [1, 8], "--spec-type": ["draft-simple"]},
    }
    for engine, argv in bases.items():
        base = make_profile(engine=engine, launch_argv=argv)
        specs = matrix_preview(base=base, axes=axes[engine], user=operator)
        assert len(specs) == 2, engine
