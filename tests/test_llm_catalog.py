"""The providers' tables and names: windows and prices per model, the
platforms' model ids, the fallback for a model no table lists, and its warning."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from openai.types.responses import ResponseUsage

from assistant.checks import models_are_known
from assistant.providers.catalog import model_context_window, price_of, telemetry_name
from assistant.providers.openai.wire import usage_from_openai
from assistant.window.loading import cache_prices


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-sonnet-4-6", 200_000),
        ("claude-sonnet-4-6[1m]", 1_000_000),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", 200_000),  # Bedrock
        ("claude-sonnet-4-5@20250929", 200_000),  # Vertex
        ("models/gemini-2.5-flash", 1_048_576),
        ("gemini-1.5-pro-002", 2_097_152),
        ("gpt-4o-mini-2024-07-18", 128_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-5-mini", 400_000),
        ("o4-mini", 200_000),
    ],
)
def test_each_provider_lists_its_models_windows(model, window):
    assert model_context_window(model) == window


def test_a_model_no_table_lists_takes_the_default_window_and_no_price(settings):
    settings.ASSISTANT_DEFAULT_CONTEXT_WINDOW = 32_000
    assert model_context_window("my-local-llama") == 32_000
    assert price_of("my-local-llama") is None
    assert price_of("claude-unlisted-7") is None  # the family's window, no price
    assert model_context_window("claude-unlisted-7") == 200_000


@pytest.mark.parametrize(
    ("provider", "model", "name"),
    [
        ("anthropic", "claude-sonnet-4-6", "anthropic"),
        ("anthropic", "anthropic.claude-3-5-haiku-20241022-v1:0", "aws.bedrock"),
        ("anthropic", "claude-sonnet-4-5@20250929", "gcp.vertex_ai"),
        ("gemini", "gemini-2.5-flash", "gcp.gemini"),
        ("openai", "gpt-4.1", "openai"),
        ("openai_responses", "gpt-5", "openai"),
        ("offline", "offline-summarizer", "offline"),
    ],
)
def test_each_provider_names_itself_in_telemetry(provider, model, name):
    assert telemetry_name(provider, model) == name


def test_platform_ids_are_priced_as_the_vendors_model():
    direct = price_of("claude-haiku-4-5")
    assert direct is not None and (direct.input, direct.cache_write) == (1.0, 1.25)
    assert price_of("anthropic.claude-haiku-4-5-20251001-v1:0") == direct  # Bedrock
    assert price_of("eu.anthropic.claude-haiku-4-5-20251001-v1:0") == direct
    assert price_of("claude-haiku-4-5@20251001") == direct  # Vertex


def test_openai_usage_includes_the_cached_and_written_parts():
    usage = usage_from_openai(
        SimpleNamespace(
            prompt_tokens=10_000,
            completion_tokens=300,
            prompt_tokens_details=SimpleNamespace(cached_tokens=6_000, cache_write_tokens=1_000),
        )
    )
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        3_000,
        6_000,
        1_000,
    )
    assert (usage.prompt_tokens, usage.output_tokens) == (10_000, 300)


def test_openai_responses_usage_splits_the_written_part_from_the_sdks_own_object():
    # The Responses API reports the write under input_tokens_details, a field the
    # SDK's InputTokensDetails does not declare: it must survive as an extra.
    reported = ResponseUsage.model_validate(
        {
            "input_tokens": 10_000,
            "output_tokens": 300,
            "total_tokens": 10_300,
            "input_tokens_details": {"cached_tokens": 6_000, "cache_write_tokens": 1_000},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    )
    usage = usage_from_openai(reported)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        3_000,
        6_000,
        1_000,
    )


def test_openai_cache_prices_have_the_models_discount_and_no_write_premium():
    gpt41 = cache_prices("gpt-4.1")
    assert (gpt41.read, gpt41.write) == (0.25, 1.0)
    gpt5 = cache_prices("gpt-5-2025-08-07")
    assert (gpt5.read, gpt5.write) == (0.1, 1.0)
    claude = cache_prices("claude-sonnet-4-6")
    assert (claude.read, claude.write) == (pytest.approx(0.1), 1.25)


def test_the_system_check_warns_of_a_configured_model_no_table_lists(settings):
    assert models_are_known() == []
    settings.OPENAI_CHAT_MODEL = "my-vllm-model"
    settings.ASSISTANT_MODEL_PRICES = {
        "my-vllm-model": {"input": 1.0, "output": 2.0, "cache_read": 0.1, "cache_write": 1.0}
    }
    (warning,) = models_are_known()
    assert warning.id == "assistant.W002"
    assert (
        warning.msg == "settings.OPENAI_CHAT_MODEL is 'my-vllm-model', whose window no table lists."
    )
    settings.ASSISTANT_MODEL_PRICES = {}
    (warning,) = models_are_known()
    assert warning.msg.endswith("whose window and price no table lists.")
