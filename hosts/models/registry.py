"""The registry: where servers run (hosts, containers) and how they are launched (profiles)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from hosts import presets

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Hostnames, users and container ids end up as argv items of ssh/pct/docker: refusing a
# leading "-" and shell-ish characters stops option injection (``-oProxyCommand=...``).
SAFE_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.@:\[\]%+-]+$")
# What ssh's -o option syntax splits on or treats specially inside a path.
UNSAFE_PATH_RE = re.compile(r"[\s\"'\\\x00-\x1f\x7f]")


def validate_safe_token(value: str) -> None:
    if value.startswith("-") or not SAFE_TOKEN_RE.match(value):
        raise ValidationError(
            "%(value)r is not allowed: use letters, digits and . _ - @ : (no leading '-').",
            params={"value": value},
        )


def _argv_token_field(help_text: str) -> models.CharField[str, str]:
    """An optional host name or address that ends up as one argv item of ssh/pct/docker."""
    return models.CharField(
        max_length=255, blank=True, validators=[validate_safe_token], help_text=help_text
    )


def _validate_argv(value: Any) -> None:
    # Empty is allowed here: an endpoint profile has no launch command (a managed profile's
    # clean() requires one).
    if not isinstance(value, list):
        raise ValidationError("Launch argv must be a non-empty list of strings.")
    for item in value:
        if not isinstance(item, str):
            raise ValidationError(
                "Every argv item must be a string, got %(item)r.", params={"item": item}
            )
        if "\x00" in item:
            raise ValidationError("Argv items cannot contain NUL bytes.")


def _validate_env(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValidationError("Environment must be a JSON object of NAME: value.")
    for name, item in value.items():
        if not ENV_NAME_RE.match(name):
            raise ValidationError(
                "%(name)r is not a valid environment variable name.", params={"name": name}
            )
        if not isinstance(item, str):
            raise ValidationError("The value of %(name)s must be a string.", params={"name": name})


def _validate_gpu_ids(value: Any) -> None:
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        raise ValidationError("GPU ids must be a list of non-negative integers, e.g. [0, 1].")
    if len(set(value)) != len(value):
        raise ValidationError("GPU ids must not repeat.")


def _validate_tags(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValidationError("Tags must be a list of strings.")


class RegistryEntry(models.Model):
    """What a host and a server profile share: the operator's notes, when the entry was added and
    last changed, and a list ordered by its unique ``name`` (each declares its own)."""

    name: str

    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class HostKind(models.TextChoices):
    LOCAL = "local", "Local (this machine)"
    SSH = "ssh", "SSH"


class KnownHostsPolicy(models.TextChoices):
    STRICT = "strict", "Strict: the key must already be in known_hosts"
    ACCEPT_NEW = "accept-new", "Accept a new key once, then check it"


class Host(RegistryEntry):
    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=10, choices=HostKind.choices, default=HostKind.LOCAL)
    address = _argv_token_field("SSH host name or IP")
    ssh_user = models.CharField(
        max_length=64, blank=True, default="root", validators=[validate_safe_token]
    )
    ssh_port = models.PositiveIntegerField(
        default=22, validators=[MinValueValidator(1), MaxValueValidator(65535)]
    )
    identity_file = models.CharField(
        max_length=500, blank=True, help_text="Path to the private key on the dashboard machine"
    )
    known_hosts_policy = models.CharField(
        max_length=12, choices=KnownHostsPolicy.choices, default=KnownHostsPolicy.STRICT
    )
    known_hosts_file = models.CharField(
        max_length=500, blank=True, help_text="Defaults to the operator's ~/.ssh/known_hosts"
    )
    jump_host = _argv_token_field("Optional ProxyJump, e.g. user@bastion:22")
    path_prepend = models.CharField(
        max_length=1000,
        blank=True,
        help_text="Directories put first on PATH for commands run on this host "
        "(e.g. the simulator's bin/ with its nvidia-smi stand-in)",
    )
    command_env = models.JSONField(
        default=dict,
        blank=True,
        validators=[_validate_env],
        help_text="Environment for every command run on this host (JSON NAME: value)",
    )

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.kind == HostKind.SSH and not self.address:
            errors["address"] = "An SSH host needs an address."
        # Both go to ssh as option values (``-i path``, ``-o UserKnownHostsFile=path``): the
        # transport refuses what ssh would read as an option or split; so does the registry,
        # or a stored value would only fail later, at the first connection.
        for name in ("identity_file", "known_hosts_file"):
            value = getattr(self, name)
            if value and (value.startswith("-") or UNSAFE_PATH_RE.search(value)):
                errors[name] = (
                    "A path without a leading '-', whitespace, quotes or backslashes, "
                    "e.g. /home/me/.ssh/id_ed25519."
                )
        if errors:
            raise ValidationError(errors)

    @property
    def destination(self) -> str:
        if self.kind == HostKind.LOCAL:
            return "local"
        user = f"{self.ssh_user}@" if self.ssh_user else ""
        return f"{user}{self.address}:{self.ssh_port}"


class ContainerKind(models.TextChoices):
    NONE = "none", "None (run on the host itself)"
    PCT = "pct", "Proxmox pct exec"
    LXC_ATTACH = "lxc-attach", "lxc-attach"
    DOCKER = "docker", "docker exec"
    INCUS = "incus", "incus exec"


class Container(models.Model):
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="containers")
    kind = models.CharField(max_length=12, choices=ContainerKind.choices, default=ContainerKind.PCT)
    ident = models.CharField(
        "id or name",
        max_length=100,
        blank=True,
        validators=[validate_safe_token],
        help_text="pct/lxc id (e.g. 129) or docker/incus container name",
    )
    label = models.CharField(max_length=100, blank=True)
    notes = models.TextField(blank=True)

    class Meta:
        ordering = ["host__name", "ident"]
        constraints = [
            models.UniqueConstraint(fields=["host", "kind", "ident"], name="container_unique_ident")
        ]

    def __str__(self) -> str:
        if self.kind == ContainerKind.NONE:
            return f"{self.host} (no container)"
        return f"{self.host} / {self.get_kind_display()} {self.ident}"

    def clean(self) -> None:
        if self.kind != ContainerKind.NONE and not self.ident:
            raise ValidationError({"ident": "This container kind needs an id or name."})


class Engine(models.TextChoices):
    SGLANG = "sglang", "SGLang"
    VLLM = "vllm", "vLLM"
    LLAMACPP = "llamacpp", "llama.cpp server"
    SIMULATOR = "simulator", "specdash simulator"
    CUSTOM = "custom", "Custom"


class ProfileKind(models.TextChoices):
    MANAGED = "managed", "Managed: specdash starts and stops it"
    ENDPOINT = "endpoint", "Endpoint: already running; specdash only measures it"


class EndpointApi(models.TextChoices):
    # The load generator's APIs (benchlib.loadgen.apis.Api), the default of sweeps of it.
    COMPLETIONS = "completions", "OpenAI completions"
    CHAT = "chat", "OpenAI chat completions"
    GENERATE = "generate", "SGLang /generate"


def endpoint_url_errors(url: str) -> str:
    """Why ``url`` is not a usable server URL (an http(s) origin, optionally with a path), or
    ""; the sweep layer normalises it further before it is used."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        return "Enter an http(s) URL, e.g. http://10.0.0.5:30000."
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "Enter an http(s) URL, e.g. http://10.0.0.5:30000."
    if parts.username or parts.password or parts.query or parts.fragment:
        return "A server URL has no user name, password, query string or fragment."
    return ""


def default_stop_grace_s() -> int:
    """A new profile's stop grace: the deployment's SPECDASH_STOP_GRACE_S (10 s)."""
    return int(settings.SPECDASH_STOP_GRACE_S)


class ServerProfile(RegistryEntry):
    name = models.CharField(max_length=120, unique=True)
    # An endpoint profile is a server someone else runs (by hand, systemd, a container, a
    # Kubernetes service): sweeps, experiments and telemetry use its URL and never start,
    # stop or claim anything for it.
    kind = models.CharField(max_length=10, choices=ProfileKind.choices, default=ProfileKind.MANAGED)
    engine = models.CharField(max_length=12, choices=Engine.choices, default=Engine.SGLANG)
    host = models.ForeignKey(
        Host,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="profiles",
        help_text="Where it runs (required for a managed profile; optional for an endpoint)",
    )
    container = models.ForeignKey(
        Container, on_delete=models.PROTECT, null=True, blank=True, related_name="profiles"
    )
    launch_argv = models.JSONField(
        default=list,
        blank=True,  # an endpoint profile has none; clean() requires one of a managed profile
        validators=[_validate_argv],
        help_text='A JSON list, e.g. ["python3", "-m", ...]',
    )
    env = models.JSONField(default=dict, blank=True, validators=[_validate_env])
    workdir = models.CharField(max_length=500, blank=True)
    port = models.PositiveIntegerField(
        blank=True,  # an endpoint profile's comes from its base URL (clean)
        validators=[MinValueValidator(1), MaxValueValidator(65535)],
    )
    gpu_ids = models.JSONField(default=list, blank=True, validators=[_validate_gpu_ids])
    readiness_path = models.CharField(max_length=200, default="/health")
    readiness_status = models.PositiveSmallIntegerField(default=200)
    readiness_timeout_s = models.PositiveIntegerField(default=600)
    stop_grace_s = models.PositiveIntegerField(
        default=default_stop_grace_s,
        validators=[MaxValueValidator(3600)],
        help_text="Seconds between SIGTERM and SIGKILL when the server is stopped (a large model "
        "may need minutes to release its GPUs)",
    )
    api_host = _argv_token_field(
        "Address the dashboard uses to reach the server's HTTP port (default: the host's "
        "address; 127.0.0.1 for a local host). A container usually has its own IP."
    )
    openai_base_path = models.CharField(max_length=200, default="/v1")
    served_model_name = models.CharField(max_length=200, blank=True)
    metrics_path = models.CharField(max_length=200, blank=True, default="/metrics")
    base_url = models.CharField(
        "base URL",
        max_length=300,
        blank=True,
        help_text="Endpoint profiles: the server's URL without the API path, e.g. "
        "http://10.0.0.5:30000",
    )
    metrics_url = models.CharField(
        "metrics URL",
        max_length=300,
        blank=True,
        help_text="Endpoint profiles: its Prometheus metrics (default: the base URL's /metrics)",
    )
    api_kind = models.CharField(
        "API",
        max_length=12,
        choices=EndpointApi.choices,
        blank=True,
        help_text="Endpoint profiles: the API its sweeps use unless they choose another",
    )
    speculative = models.BooleanField(
        default=False, help_text="Uses speculative decoding (shown in comparisons and verdicts)"
    )
    tags = models.JSONField(default=list, blank=True, validators=[_validate_tags])
    # A parameter matrix's variant of this base profile: listed under it, not beside it.
    variant_of = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="variants",
        help_text="The profile this one is a parameter-matrix variant of (listed under it)",
    )

    @property
    def is_endpoint(self) -> bool:
        return self.kind == ProfileKind.ENDPOINT

    @property
    def managed_host(self) -> Host:
        """The host a managed profile's server runs on (an endpoint profile may have none)."""
        if self.host is None:
            raise ValueError(f"{self.name} is an endpoint profile without a host")
        return self.host

    @property
    def endpoint_metrics_url(self) -> str:
        return self.metrics_url or (self.base_url.rstrip("/") + "/metrics")

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.is_endpoint:
            errors.update(self._endpoint_errors())
        else:
            if self.host_id is None:
                errors["host"] = "A managed profile runs on a registered host: choose one."
            if not self.port:
                errors["port"] = "A managed profile needs the port its server listens on."
            if isinstance(self.launch_argv, list) and not self.launch_argv:
                errors["launch_argv"] = "Launch argv must be a non-empty list of strings."
        if (
            self.container_id is not None
            and self.host_id is not None
            and self.container is not None
            and self.container.host_id != self.host_id
        ):
            errors["container"] = "This container is on another host."
        for field in ("readiness_path", "openai_base_path", "metrics_path"):
            value = getattr(self, field)
            if value and not value.startswith("/"):
                errors[field] = "Paths start with '/'."
        if not 100 <= self.readiness_status <= 599:
            errors["readiness_status"] = "An HTTP status code is between 100 and 599."
        if not self.is_endpoint:
            errors.update(self._launch_argv_errors())
        if errors:
            raise ValidationError(errors)

    def _endpoint_errors(self) -> dict[str, str]:
        errors: dict[str, str] = {}
        if not self.base_url:
            errors["base_url"] = "An endpoint profile needs the server's base URL."
        elif problem := endpoint_url_errors(self.base_url):
            errors["base_url"] = problem
        else:
            # The port is the URL's: kept in the Port field so lists and conflicts read alike.
            parts = urlsplit(self.base_url)
            self.port = parts.port or (443 if parts.scheme == "https" else 80)
        if self.metrics_url and (problem := endpoint_url_errors(self.metrics_url)):
            errors["metrics_url"] = problem
        if self.launch_argv:
            errors["launch_argv"] = (
                "An endpoint profile has no launch command: specdash does not start it."
            )
        if self.gpu_ids:
            errors["gpu_ids"] = "An endpoint profile claims no GPUs: specdash does not run it."
        if self.container_id is not None:
            errors["container"] = "An endpoint profile is reached by URL, not in a container."
        return errors

    def _launch_argv_errors(self) -> dict[str, str]:
        # The Port field is what the dashboard connects to and claims; a launch command that
        # listens elsewhere would wait out its readiness timeout, so the two must agree.
        if not isinstance(self.launch_argv, list):
            return {}  # _validate_argv reports the shape
        argv = [str(arg) for arg in self.launch_argv]
        errors: dict[str, str] = {}
        placeholders = presets.placeholders_in(argv)
        if placeholders:
            errors["launch_argv"] = " ".join(
                f"Replace the placeholder {name} with {presets.PLACEHOLDERS[name]}."
                for name in dict.fromkeys(placeholders)
            )
        written = presets.argv_port(argv)
        if written is not None and self.port and written != str(self.port):
            errors["port"] = (
                f"The Port field says {self.port} but the launch command has --port {written}: "
                "make them agree (the dashboard connects to the Port field's port)."
            )
        return errors

    def apply_preset_defaults(self) -> None:
        """Fill blank fields from the engine's preset (port, readiness path, argv template)."""
        presets.apply_defaults(self)

    @property
    def base_url_path(self) -> str:
        return self.openai_base_path.rstrip("/")
