from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from core.models import ApiToken, Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["pk", "kind", "state", "lock_key", "worker_id", "created_at", "finished_at"]
    list_filter = ["state", "kind"]
    readonly_fields = [f.name for f in Job._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    # The secret exists only in the response that creates it; the admin never shows it again.
    list_display = [
        "name",
        "user",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "user__username"]
    fields = ["user", "name", "expires_at", "revoked_at", "prefix", "created_at", "last_used_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is not None and obj.revoked_at is not None:
            # Revocation is final: a revoked token is read-only, so nobody un-revokes it (or
            # extends it) by clearing the date, whoever's token it is.
            return [name for name in self.fields if isinstance(name, str)]
        return [*self.readonly_fields, "user"] if obj is not None else list(self.readonly_fields)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        # Only a superuser mints tokens for other accounts (tokens.can_issue_token); everyone
        # else is offered, and may submit, only themselves.
        if db_field.name == "user" and not request.user.is_superuser:
            kwargs["queryset"] = get_user_model()._default_manager.filter(pk=request.user.pk or 0)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm, change: bool) -> None:  # type: ignore[type-arg]
        from core.tokens import (
            DISPLAY_PREFIX_LENGTH,
            can_issue_token,
            new_secret,
            token_digest,
        )

        if change:
            super().save_model(request, obj, form, change)
            return
        if not can_issue_token(actor=request.user, user=obj.user):
            raise PermissionDenied("Only a superuser creates tokens for other accounts.")
        secret = new_secret()
        obj.token_hash = token_digest(secret)
        obj.prefix = secret[:DISPLAY_PREFIX_LENGTH]
        super().save_model(request, obj, form, change)
        messages.warning(
            request, f"Token for {obj.user}: {secret}  (copy it now, it is not shown again)"
        )

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        from core.tokens import api_token_revoke

        for token in queryset:
            api_token_revoke(token=token)
