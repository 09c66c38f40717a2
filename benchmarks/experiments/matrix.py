"""Server-parameter matrices: a base ServerProfile plus axes over its launch argv, expanded
into variant ServerProfile rows that an experiment then runs as arms.

An axis is a flag and its values. ``"--speculative-num-steps": [1, 2, 3]`` sets that flag's
value (replacing it in the argv, or appending it when the base does not have it);
``"--speculative-config.num_speculative_tokens": [1, 3]`` sets a key inside a JSON-valued
flag, which must already be in the base argv. Several axes give their product. "Speculation
off" is a variant of its own, written per engine (``off_argv``), because turning speculation off
means dropping flags, not setting one.

A variant is a copy of the base (same host, port, container, readiness, ...) with the argv
changed; one that already exists with the same host, engine and argv is reused, so running the
same matrix twice does not multiply the registry.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from core.roles import can_manage_registry
from hosts.models import ServerProfile
from hosts.presets import tuning_flag

Scalar = int | float | str | bool

# Axes over these set the draft length: their variants are named "K=v".
DRAFT_LENGTH_AXES = frozenset(
    {
        "--speculative-num-steps",
        "--speculative-config.num_speculative_tokens",
        "--spec-steps",
        "--spec-draft-n-max",
    }
)
# Flags without a value, per engine family: dropping them must not drop the next token.
_SWITCHES = frozenset({"--speculative-adaptive", "--disable-cuda-graph-padding"})
# What "speculation off" drops, per engine (flag prefixes and exact flags).
_OFF_DROP: dict[str, tuple[str, ...]] = {
    "sglang": ("--speculative-",),
    "vllm": ("--speculative-config", "--speculative-model", "--num-speculative-tokens"),
    "llamacpp": ("-md", "--model-draft", "--spec-", "--draft-"),
    "simulator": ("--speculative-",),
}
MAX_VARIANTS = 16


@dataclass(frozen=True)
class Axis:
    flag: str
    key: tuple[str, ...]  # the path inside a JSON-valued flag; () for a plain flag
    values: tuple[Scalar, ...]

    @property
    def name(self) -> str:
        return ".".join((self.flag, *self.key))


@dataclass(frozen=True)
class VariantSpec:
    name_suffix: str  # "K=3", "off"
    argv: list[str]
    speculative: bool


def parse_axes(axes: Mapping[str, Any]) -> list[Axis]:
    """Axes from ``{"--flag": [...], "--json-flag.key": [...]}``; ValidationError (keyed
    "axes") on an empty list, a non-scalar or repeated value, or a name that is not a flag."""
    out = []
    for name, values in axes.items():
        flag, _, path = name.partition(".")
        if not flag.startswith("-") or len(flag) < 2 or " " in flag:
            raise ValidationError({"axes": [f"{name!r}: an axis is a flag, e.g. --max-num-seqs"]})
        if not isinstance(values, list) or not values:
            raise ValidationError({"axes": [f"{name}: give a non-empty list of values"]})
        bad = [v for v in values if not isinstance(v, int | float | str) or v is None]
        if bad:
            raise ValidationError(
                {"axes": [f"{name}: values must be numbers or strings, not {bad[0]!r}"]}
            )
        if not path and any(isinstance(v, bool) for v in values):
            raise ValidationError(
                {"axes": [f"{name}: true/false only inside a JSON flag (name.key)"]}
            )
        if len({json.dumps(v) for v in values}) != len(values):
            raise ValidationError({"axes": [f"{name}: repeated values"]})
        key = tuple(path.split(".")) if path else ()
        if any(not part for part in key):
            raise ValidationError({"axes": [f"{name}: an empty key"]})
        out.append(Axis(flag, key, tuple(values)))
    return out


def check_axes(engine: str, axes: Sequence[Axis], *, user: Any) -> None:
    """ValidationError (keyed "axes") unless every axis is one of ``engine``'s declared tuning
    flags (hosts.presets.TUNING_FLAGS) with values of its type and range, or ``user`` is
    staff allowed to edit profiles: any other flag could change what the server runs, where
    it binds or what it writes, which only staff decide."""
    if can_manage_registry(user):
        return
    for axis in axes:
        declared = tuning_flag(engine, axis.name)
        if declared is None:
            raise ValidationError(
                {
                    "axes": [
                        f"{axis.name}: not a tuning flag of a {engine} profile; only staff "
                        "may vary other flags (docs/engines.md, 'Matrix axes')"
                    ]
                }
            )
        for value in axis.values:
            problem = declared.problem(value)
            if problem:
                raise ValidationError({"axes": [f"{axis.name}: {problem}"]})


def _flag_index(argv: Sequence[str], flag: str) -> tuple[int, bool]:
    """(index of ``flag`` in argv, whether written ``--flag=value``); (-1, False) if absent."""
    for i, token in enumerate(argv):
        if token == flag:
            return i, False
        if token.startswith(flag + "="):
            return i, True
    return -1, False


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    i, joined = _flag_index(argv, flag)
    if i < 0:
        return None
    if joined:
        return argv[i][len(flag) + 1 :]
    return argv[i + 1] if i + 1 < len(argv) else None


def set_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    i, joined = _flag_index(out, flag)
    if i < 0:
        return [*out, flag, value]
    if joined:
        out[i] = f"{flag}={value}"
    elif i + 1 < len(out):
        out[i + 1] = value
    else:
        out.append(value)
    return out


def drop_flags(argv: Sequence[str], prefixes: Sequence[str]) -> list[str]:
    """argv without every flag matching one of ``prefixes`` (exact, or a prefix ending "-")
    and its value."""
    out: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        flag = token.split("=", 1)[0]
        if any(flag == p or (p.endswith("-") and flag.startswith(p)) for p in prefixes):
            skip = "=" not in token and flag not in _SWITCHES
            continue
        out.append(token)
    return out


def _text(value: Scalar) -> str:
    return str(value)


def apply_axis(argv: Sequence[str], axis: Axis, value: Scalar) -> list[str]:
    if not axis.key:
        return set_flag(argv, axis.flag, _text(value))
    raw = flag_value(argv, axis.flag)
    if raw is None:
        raise ValidationError({"axes": [f"{axis.name}: {axis.flag} is not in the base argv"]})
    try:
        config = json.loads(raw)
    except json.JSONDecodeError:
        raise ValidationError({"axes": [f"{axis.name}: {axis.flag}'s value is not JSON"]}) from None
    if not isinstance(config, dict):
        raise ValidationError({"axes": [f"{axis.name}: {axis.flag}'s value is not an object"]})
    node = config
    for part in axis.key[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[axis.key[-1]] = value
    return set_flag(argv, axis.flag, json.dumps(config, separators=(",", ":")))


def off_argv(engine: str, argv: Sequence[str]) -> list[str]:
    """The base argv with speculation turned off, as the engine takes it."""
    prefixes = _OFF_DROP.get(engine)
    if prefixes is None:
        raise ValidationError(
            {"include_off": [f"speculation off is not known for a {engine!r} profile"]}
        )
    out = drop_flags(argv, prefixes)
    if engine == "simulator":
        # A speculative simulator profile (--profile eagle3) drafts without any flag; its
        # engine flag at 0 runs it as the server without a drafter (the profile's off costs),
        # where --spec-steps 0 would keep the drafting server's step costs.
        if flag_value(out, "--metrics-style") == "vllm":
            out += ["--speculative-config", '{"num_speculative_tokens":0}']
        else:
            out += ["--speculative-num-steps", "0"]
    return out


def _label(axis: Axis, value: Scalar) -> str:
    if axis.name in DRAFT_LENGTH_AXES:
        return f"K={value}"
    return f"{axis.name.lstrip('-')}={value}"


def expand(
    base: ServerProfile, axes: Sequence[Axis], *, include_off: bool = False
) -> list[VariantSpec]:
    """The variants' argv (not saved): the axes' product, then "off" when asked."""
    specs = []
    for combo in itertools.product(*(axis.values for axis in axes)):
        argv = list(base.launch_argv)
        labels = []
        speculative = base.speculative
        for axis, value in zip(axes, combo, strict=True):
            argv = apply_axis(argv, axis, value)
            labels.append(_label(axis, value))
            if axis.name in DRAFT_LENGTH_AXES and value in (0, "0"):
                speculative = False
        specs.append(VariantSpec(", ".join(labels), argv, speculative))
    if include_off:
        specs.append(VariantSpec("off", off_argv(base.engine, base.launch_argv), False))
    if not 1 <= len(specs) <= MAX_VARIANTS:
        raise ValidationError({"axes": [f"{len(specs)} variants: 1 to {MAX_VARIANTS} allowed"]})
    return specs


_COPIED = (
    "engine",
    "host_id",
    "container_id",
    "env",
    "workdir",
    "port",
    "gpu_ids",
    "readiness_path",
    "readiness_status",
    "readiness_timeout_s",
    "stop_grace_s",
    "api_host",
    "openai_base_path",
    "served_model_name",
    "metrics_path",
    "tags",
)


def _free_name(name: str) -> str:
    candidate, n = name[:120], 2
    while ServerProfile.objects.filter(name=candidate).exists():
        suffix = f" #{n}"
        candidate, n = name[: 120 - len(suffix)] + suffix, n + 1
    return candidate


def variant_profile(
    base: ServerProfile, suffix: str, argv: list[str], *, speculative: bool, notes: str = ""
) -> ServerProfile:
    """The profile running ``argv`` on the base's host: an existing one with the same host,
    engine and argv, else a new validated copy of the base named "Base [suffix]"."""
    host = base.managed_host  # matrix_preview refuses an endpoint base before any variant
    for existing in ServerProfile.objects.filter(host=host, engine=base.engine):
        if existing.launch_argv == argv:
            return existing
    variant = ServerProfile(
        name=_free_name(f"{base.name} [{suffix}]"),
        launch_argv=argv,
        speculative=speculative,
        notes=notes or f"Variant of {base.name} (#{base.pk}): {suffix}.",
        variant_of=base.variant_of or base,
        **{field: getattr(base, field) for field in _COPIED},
    )
    try:
        variant.full_clean()
    except ValidationError as exc:
        raise ValidationError({"axes": [f"{suffix}: {'; '.join(exc.messages)}"]}) from None
    variant.save()
    return variant


def matrix_preview(
    *, base: ServerProfile, axes: Mapping[str, Any], include_off: bool = False, user: Any
) -> list[VariantSpec]:
    """The variants ``matrix_variants`` would run for ``user``, in arm order, without saving
    anything; ValidationError (keyed "axes") as it would raise (``check_axes`` included)."""
    if base.is_endpoint:
        raise ValidationError(
            {"base": [f"{base.name} is an endpoint: it has no launch command to vary"]}
        )
    parsed = parse_axes(axes)
    check_axes(base.engine, parsed, user=user)
    specs = expand(base, parsed, include_off=include_off)
    return [specs[-1], *specs[:-1]] if include_off else specs


def matrix_variants(
    *, base: ServerProfile, axes: Mapping[str, Any], include_off: bool = False, user: Any
) -> list[ServerProfile]:
    """The variant profiles of ``base`` over ``axes`` (created or reused), "off" first when
    asked (the simplest variant, the reference of a comparison and of a schedule). Only staff
    may vary a flag that is not one of the engine's tuning flags (``check_axes``)."""
    specs = matrix_preview(base=base, axes=axes, include_off=include_off, user=user)
    with transaction.atomic():
        profiles = [
            variant_profile(base, s.name_suffix, s.argv, speculative=s.speculative) for s in specs
        ]
    if len({p.pk for p in profiles}) != len(profiles):
        raise ValidationError({"axes": ["two variants have the same argv"]})
    return profiles
