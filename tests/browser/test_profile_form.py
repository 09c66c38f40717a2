"""The server profile form as a first-time operator meets it: choosing an engine loads its
preset in place, and a port or placeholder the server would trip over is refused on save."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser


def _argv(page: Page) -> list[str]:
    value: list[str] = json.loads(page.locator("#id_launch_argv").input_value())
    return value


def _open_add_form(page: Page, dashboard: Dashboard, name: str) -> None:
    login(page, dashboard)
    page.goto(dashboard.url + "/admin/hosts/serverprofile/add/")
    page.fill("#id_name", name)
    page.select_option("#id_host", label="local")


def test_choosing_an_engine_loads_its_preset_and_keeps_an_edited_command(
    page: Page, dashboard: Dashboard
) -> None:
    _open_add_form(page, dashboard, "preset switch")
    assert "sglang.launch_server" in _argv(page)  # the add form opens on SGLang's preset
    page.select_option("#id_engine", "vllm")
    note = page.get_by_test_id("preset-note")
    expect(note).to_contain_text("Loaded the vLLM preset. Replace MODEL")
    argv = _argv(page)
    assert argv[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--port") + 1] == "8100"
    expect(page.locator("#id_port")).to_have_value("8100")  # not the dashboard's 8000
    page.select_option("#id_engine", "llamacpp")
    expect(note).to_contain_text("Loaded the llama.cpp server preset")
    assert _argv(page)[0] == "llama-server"
    expect(page.locator("#id_port")).to_have_value("8080")
    edited = ["/opt/llama/llama-server", "-m", "/models/q.gguf", "--port", "8080"]
    page.fill("#id_launch_argv", json.dumps(edited))
    page.select_option("#id_engine", "sglang")
    expect(note).to_contain_text("Kept your edited launch command")
    assert _argv(page) == edited
    expect(page.locator("#id_port")).to_have_value("8080")


def test_a_port_that_disagrees_with_the_launch_command_is_refused_with_both_values(
    page: Page, dashboard: Dashboard
) -> None:
    _open_add_form(page, dashboard, "port mismatch")
    page.select_option("#id_engine", "simulator")
    expect(page.get_by_test_id("preset-note")).to_contain_text("Loaded the specdash simulator")
    page.fill("#id_port", "30005")
    page.click("input[name=_save]")
    error = page.locator(".field-port .errorlist")
    expect(error).to_contain_text("The Port field says 30005")
    expect(error).to_contain_text("--port 30000")
    # Made to agree, it saves.
    page.fill("#id_port", "30000")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")


def test_a_preset_placeholder_is_refused_until_replaced(page: Page, dashboard: Dashboard) -> None:
    _open_add_form(page, dashboard, "placeholder")
    page.select_option("#id_engine", "llamacpp")
    expect(page.get_by_test_id("preset-note")).to_contain_text("Replace MODEL.gguf, DRAFT.gguf")
    page.click("input[name=_save]")
    error = page.locator(".field-launch_argv .errorlist")
    expect(error).to_contain_text("Replace the placeholder MODEL.gguf")
    expect(error).to_contain_text("DRAFT.gguf")
    argv = [
        {"MODEL.gguf": "/models/t.gguf", "DRAFT.gguf": "/models/d.gguf"}.get(a, a)
        for a in _argv(page)
    ]
    page.fill("#id_launch_argv", json.dumps(argv))
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
