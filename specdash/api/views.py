"""The account page where a user creates and revokes personal API tokens."""

from __future__ import annotations

from datetime import datetime, time

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from core import tokens
from core.models import ApiToken


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What it is for, e.g. nightly CI")
    expires_on = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Optional; the token stops working at the end of that day (UTC)",
    )

    def clean_expires_on(self) -> datetime | None:
        day = self.cleaned_data.get("expires_on")
        if day is None:
            return None
        end = datetime.combine(day, time.max, tzinfo=timezone.get_current_timezone())
        if end <= timezone.now():
            raise forms.ValidationError("Choose a day in the future.")
        return end


def token_list(request: HttpRequest) -> HttpResponse:
    # Any logged-in user may hold tokens: a token carries exactly its owner's roles.
    form = TokenForm(request.POST or None)
    created_secret = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            _token, created_secret = tokens.api_token_create(
                user=request.user,
                name=form.cleaned_data["name"],
                expires_at=form.cleaned_data["expires_on"],
            )
            form = TokenForm()
        else:
            status = 400
    context = {
        "form": form,
        "tokens": tokens.user_tokens(user=request.user),
        "created_secret": created_secret,
        "nav": "tokens",
    }
    return render(request, "account/tokens.html", context, status=status)


@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    tokens.api_token_revoke(token=token)
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("account-tokens")
