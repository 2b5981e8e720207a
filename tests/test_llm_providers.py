"""The real SDKs against the loopback fake: request bodies, usage, retries, fallback."""

import functools
import json
import logging
import re
import time
from pathlib import Path

import pytest

from assistant.providers import (
    ProviderError,
    SummaryRejected,
    Usage,
    get_provider,
    provider_name,
    summarize,
)
from assistant.providers.anthropic.provider import AnthropicProvider
from assistant.providers.cached_request import CachedRequest
from assistant.providers.gemini.provider import GeminiProvider
from assistant.services import add_message, build_context
from tests.fake_llm import fake_llm, malformed, ok, overflow, overloaded, rate_limited, slow
from tests.host_chat import host_chat

__all__ = ["fake_llm"]  # the fixture, until conftest loads tests.fake_llm as a plugin

MESSAGES = [
    {"role": "user", "content": "Show post 7"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", "name": "get_blog_post", "arguments": {"id": 7}}],
    },
    {"role": "tool", "content": "Hello", "tool_call_id": "call_1", "tool_name": "get_blog_post"},
    {"role": "user", "content": "Summarize it"},
]
TOOLS = [{"name": "get_blog_post", "description": "Read a post", "parameters": {"type": "object"}}]
REAL = Path(__file__).resolve().parent.parent / "bench" / "data" / "real"
TRANSCRIPT = "[user] Restore post-17 please.\n[assistant] Restored post-17."


@pytest.fixture
def anthropic_fake(fake_llm, settings):
    fake_llm.use_anthropic(settings, key="test-key-anthropic-SECRET")
    return fake_llm


@pytest.fixture
def gemini_fake(fake_llm, settings):
    fake_llm.use_gemini(settings, key="test-key-gemini-SECRET")
    return fake_llm


PROVIDER_FAKES = {
    "anthropic": ("use_anthropic", "anthropic.messages"),
    "openai": ("use_openai", "openai.chat"),
    "gemini": ("use_gemini", "gemini.generate"),
    "gemini_interactions": ("use_gemini_interactions", "gemini.interactions"),
}
# What a malformed body raises in each SDK (the Interactions API validates it as a model).
MALFORMED_CAUSES = {"gemini_interactions": "APIResponseValidationError"}


@pytest.fixture(params=list(PROVIDER_FAKES))
def provider_fake(request, fake_llm, settings):
    use, kind = PROVIDER_FAKES[request.param]
    getattr(fake_llm, use)(settings, key=f"test-key-{request.param}-SECRET")
    fake_llm.kind = kind
    fake_llm.malformed_cause = MALFORMED_CAUSES.get(request.param, "JSONDecodeError")
    # Every test through this fixture scripts the summarizer's replies.
    fake_llm.script_provider = functools.partial(fake_llm.script_summaries, provider=request.param)
    return fake_llm


def test_the_provider_follows_the_setting(settings, anthropic_fake):
    assert isinstance(get_provider(), AnthropicProvider)
    settings.ASSISTANT_SUMMARIZER = "auto"
    settings.ANTHROPIC_API_KEY = ""
    settings.GEMINI_API_KEY = "test-key"
    assert isinstance(get_provider(), GeminiProvider)
    settings.GEMINI_API_KEY = ""
    assert get_provider().name == "offline"


KEY_NAMES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY")


@pytest.mark.parametrize(
    ("in_settings", "in_environment", "chosen"),
    [
        ({"GEMINI_API_KEY": "g", "OPENAI_API_KEY": "o"}, {"ANTHROPIC_API_KEY": "a"}, "openai"),
        ({"GEMINI_API_KEY": "g"}, {"ANTHROPIC_API_KEY": "a"}, "gemini"),
        ({}, {"GEMINI_API_KEY": "g", "OPENAI_API_KEY": "o"}, "openai"),
        ({}, {"GOOGLE_API_KEY": "g"}, "gemini"),
        ({}, {}, "offline"),
    ],
)
def test_auto_takes_the_first_key_found_settings_first_then_the_sdks_variables(
    settings, monkeypatch, in_settings, in_environment, chosen
):
    settings.ASSISTANT_SUMMARIZER = "auto"
    for name in KEY_NAMES:
        monkeypatch.delenv(name, raising=False)
        if name != "GOOGLE_API_KEY":
            setattr(settings, name, in_settings.get(name, ""))
    for name, value in in_environment.items():
        monkeypatch.setenv(name, value)

    assert provider_name() == chosen
    assert get_provider().name == chosen


def test_an_openai_summary_request_is_what_the_api_expects(settings, fake_llm):
    fake_llm.use_openai(settings, key="test-key-openai-SECRET")
    settings.OPENAI_SUMMARY_MODEL = "gpt-4.1-nano"
    settings.SUMMARY_MAX_OUTPUT_TOKENS = 1024

    result = summarize(TRANSCRIPT)

    (request,) = fake_llm.requests_for("openai.chat")
    body = request.body
    assert (body["model"], body["max_completion_tokens"]) == ("gpt-4.1-nano", 1024)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "post-17" in body["messages"][1]["content"]
    assert request.headers["authorization"] == "Bearer test-key-openai-SECRET"
    assert (result.provider, result.model, result.fallback) == ("openai", "gpt-4.1-nano", False)


def test_anthropic_summary_request_is_what_the_api_expects(settings, anthropic_fake):
    settings.SUMMARY_MAX_OUTPUT_TOKENS = 1024

    result = summarize(TRANSCRIPT)

    (request,) = anthropic_fake.requests_for("anthropic.messages")
    assert request.headers["authorization"] == "Bearer test-key-anthropic-SECRET"
    assert request.headers["anthropic-version"]
    assert request.body["model"] == "claude-haiku-4-5"
    assert request.body["max_tokens"] == 1024
    assert "Do not continue the conversation" in request.body["system"]
    assert request.body["messages"] == [
        {
            "role": "user",
            "content": f"<conversation>\n{TRANSCRIPT}\n</conversation>\n\n"
            "Write the summary now, in the six sections.",
        }
    ]
    assert (result.provider, result.model, result.fallback) == (
        "anthropic",
        "claude-haiku-4-5",
        False,
    )


def test_anthropic_chat_request_keeps_tool_pairs_and_cache_breakpoints(anthropic_fake):
    provider = get_provider()

    host_chat(
        provider.name,
        "System prompt",
        ["## Goal\n- old summary"],
        MESSAGES,
        max_tokens=300,
        tools=TOOLS,
    )

    (request,) = anthropic_fake.requests_for("anthropic.messages")
    body = request.body
    assert body["model"] == "claude-sonnet-4-6"
    assert body["max_tokens"] == 300
    assert body["system"] == [
        {"type": "text", "text": "System prompt", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "## Goal\n- old summary", "cache_control": {"type": "ephemeral"}},
    ]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_blog_post", "input": {"id": 7}}
    ]
    assert body["messages"][2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": "Hello",
    }
    assert str(body).count("cache_control") == 3
    assert body["tools"] == [
        {"name": "get_blog_post", "description": "Read a post", "input_schema": {"type": "object"}}
    ]


def test_anthropic_chat_returns_tool_calls(anthropic_fake):
    call = {"id": "toolu_1", "name": "get_blog_post", "arguments": {"id": 8}}
    anthropic_fake.script_anthropic(ok(text="Checking.", tool_calls=[call]))

    reply = host_chat(get_provider().name, "sys", [], MESSAGES, max_tokens=100, tools=TOOLS)

    assert (reply.text, reply.tool_calls, reply.stop_reason) == ("Checking.", [call], "tool_use")


def test_gemini_summary_request_is_what_the_api_expects(settings, gemini_fake):
    settings.SUMMARY_MAX_OUTPUT_TOKENS = 1024

    result = summarize(TRANSCRIPT)

    (request,) = gemini_fake.requests_for("gemini.generate")
    assert request.path == "/v1/models/gemini-2.5-flash-lite:generateContent"
    assert request.headers["x-goog-api-key"] == "test-key-gemini-SECRET"
    assert request.body["generationConfig"] == {"maxOutputTokens": 1024, "temperature": 0.2}
    assert "Do not continue" in request.body["systemInstruction"]["parts"][0]["text"]
    assert request.body["contents"][0]["parts"][0]["text"].startswith(
        f"<conversation>\n{TRANSCRIPT}\n</conversation>"
    )
    assert (result.provider, result.fallback) == ("gemini", False)


def test_gemini_chat_request_keeps_tool_pairs(gemini_fake):
    host_chat(
        get_provider().name, "System prompt", ["old summary"], MESSAGES, max_tokens=300, tools=TOOLS
    )

    (request,) = gemini_fake.requests_for("gemini.generate")
    body = request.body
    assert request.path == "/v1/models/gemini-2.5-flash:generateContent"
    assert body["systemInstruction"]["parts"] == [{"text": "System prompt\n\nold summary"}]
    assert body["generationConfig"]["maxOutputTokens"] == 300
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][1]["parts"] == [
        {"functionCall": {"id": "call_1", "name": "get_blog_post", "args": {"id": 7}}}
    ]
    assert body["contents"][2]["parts"][0] == {
        "functionResponse": {
            "id": "call_1",
            "name": "get_blog_post",
            "response": {"result": "Hello"},
        }
    }
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "get_blog_post"


def test_usage_is_normalized_the_same_way_for_both_providers(settings, fake_llm):
    # The same 1000-token prompt, 600 of it read from cache, as each provider reports it.
    fake_llm.use_anthropic(settings)
    settings.GEMINI_API_KEY = "test-key-gemini"
    settings.GEMINI_BASE_URL = fake_llm.url
    fake_llm.script_summaries(
        ok(
            usage={
                "input_tokens": 400,
                "output_tokens": 20,
                "cache_read_input_tokens": 600,
                "cache_creation_input_tokens": 0,
            }
        )
    )
    fake_llm.script_summaries(
        ok(
            usage={
                "promptTokenCount": 1000,
                "cachedContentTokenCount": 600,
                "candidatesTokenCount": 20,
            }
        ),
        provider="gemini",
    )

    from_anthropic = get_provider("anthropic").summarize(TRANSCRIPT).usage
    from_gemini = get_provider("gemini").summarize(TRANSCRIPT).usage

    expected = Usage(input_tokens=400, output_tokens=20, cache_read_tokens=600)
    assert from_anthropic == expected
    assert from_gemini == expected
    assert from_anthropic.prompt_tokens == from_gemini.prompt_tokens == 1000


def test_anthropic_null_cache_fields_count_as_zero_and_cache_writes_are_prompt(anthropic_fake):
    anthropic_fake.script_summaries(
        ok(usage={"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": None,
                  "cache_read_input_tokens": None}),
        ok(usage={"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 90,
                  "cache_read_input_tokens": 0}),
    )  # fmt: skip
    provider = get_provider()

    first = provider.summarize(TRANSCRIPT).usage
    second = provider.summarize(TRANSCRIPT).usage

    assert (first.prompt_tokens, first.cache_read_tokens, first.cache_write_tokens) == (10, 0, 0)
    assert (second.prompt_tokens, second.cache_write_tokens) == (100, 90)


@pytest.mark.parametrize("retries", [0, 2])
def test_retries_are_bounded_then_the_offline_summarizer_answers(
    settings, provider_fake, caplog, retries
):
    settings.LLM_MAX_RETRIES = retries
    provider_fake.script_provider(*[overloaded()] * 5)
    caplog.set_level(logging.DEBUG)

    result = summarize(TRANSCRIPT)

    assert provider_fake.count(provider_fake.kind) == retries + 1
    assert (result.provider, result.fallback) == ("offline", True)
    assert "post-17" in result.text
    (warning,) = [r for r in caplog.records if r.name == "assistant.providers"]
    assert warning.levelno == logging.WARNING
    assert "error=ProviderError" in warning.getMessage()
    assert "SECRET" not in caplog.text
    assert "post-17" not in warning.getMessage()


def test_a_rate_limit_is_retried_and_the_call_then_succeeds(provider_fake):
    provider_fake.script_provider(rate_limited(retry_after=0.01), ok())

    result = summarize(TRANSCRIPT)

    assert provider_fake.count(provider_fake.kind) == 2
    assert result.fallback is False


def test_an_hour_long_retry_after_is_capped_at_the_timeout(settings, anthropic_fake):
    # 2 s: the wait for the retry, and the retry's own bound (at 0.2 s, a loaded
    # machine could time the answer out too).
    settings.LLM_TIMEOUT_SECONDS = 2.0
    anthropic_fake.script_summaries(rate_limited(retry_after=3600), ok())
    started = time.monotonic()

    result = summarize(TRANSCRIPT)

    assert time.monotonic() - started < 60  # not the hour the provider asked for
    assert result.fallback is False
    assert anthropic_fake.count("anthropic.messages") == 2


def test_without_fallback_the_provider_error_is_raised(settings, anthropic_fake):
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    anthropic_fake.script_summaries(*[overloaded()] * 3)

    with pytest.raises(ProviderError) as raised:
        summarize(TRANSCRIPT)

    assert (raised.value.provider, raised.value.status) == ("anthropic", 529)
    assert type(raised.value.__cause__).__name__ == "OverloadedError"
    assert anthropic_fake.count("anthropic.messages") == 3


def test_an_overflow_is_not_retried(provider_fake, settings):
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    provider_fake.script_provider(overflow())

    with pytest.raises(ProviderError) as raised:
        summarize(TRANSCRIPT)

    assert raised.value.overflow is True
    assert provider_fake.count(provider_fake.kind) == 1


def test_a_slow_response_times_out_and_falls_back(settings, provider_fake):
    settings.LLM_TIMEOUT_SECONDS = 0.5
    settings.LLM_MAX_RETRIES = 0
    provider_fake.script_provider(slow(2.0))

    result = summarize(TRANSCRIPT)

    assert (result.provider, result.fallback) == ("offline", True)
    assert provider_fake.count(provider_fake.kind) == 1


def test_a_malformed_body_falls_back(provider_fake, caplog):
    provider_fake.script_provider(malformed())

    result = summarize(TRANSCRIPT)

    assert result.fallback is True
    assert f"cause={provider_fake.malformed_cause}" in caplog.text


BAD_SUMMARIES = {
    "empty": "",
    "error text": "Error: the upstream service failed to respond.",
    "continuation": "Sure! Post 17 has been restored, anything else?",
}


@pytest.mark.parametrize("bad", BAD_SUMMARIES.values(), ids=BAD_SUMMARIES.keys())
def test_a_bad_summary_is_replaced_by_the_offline_one(provider_fake, caplog, bad):
    provider_fake.script_provider(ok(text=bad))

    result = summarize(TRANSCRIPT)

    assert result.fallback is True
    assert result.text.startswith("## Goal\n- Restore post-17 please.")
    assert bad not in result.text or bad == ""
    assert "error=SummaryRejected" in caplog.text


@pytest.mark.parametrize("bad", BAD_SUMMARIES.values(), ids=BAD_SUMMARIES.keys())
def test_a_bad_summary_is_raised_without_fallback(settings, provider_fake, bad):
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    provider_fake.script_provider(ok(text=bad))

    with pytest.raises(SummaryRejected):
        summarize(TRANSCRIPT)

    assert provider_fake.count(provider_fake.kind) == 1


# --- Reused tool-call ids and calls without ids, through the real SDKs ------------------

SEARCH = {"id": "call_A", "name": "search", "arguments": {"q": "HAT001"}}
REUSED = [
    {"role": "user", "content": "Is flight HAT001 still available?"},
    {"role": "assistant", "content": "", "tool_calls": [SEARCH]},
    {"role": "tool", "content": "3 seats", "tool_call_id": "call_A", "tool_name": "search"},
    {"role": "assistant", "content": "Checking again.", "tool_calls": [SEARCH]},
    {"role": "tool", "content": "2 seats", "tool_call_id": "call_A", "tool_name": "search"},
    {"role": "user", "content": "Book it."},
]


def test_anthropic_gets_unique_tool_use_ids_each_result_following_its_call(anthropic_fake):
    host_chat(get_provider().name, "sys", [], REUSED, max_tokens=100)

    (request,) = anthropic_fake.requests_for("anthropic.messages")
    blocks = [
        (b["type"], b.get("id") or b.get("tool_use_id"))
        for m in request.body["messages"]
        for b in m["content"]
        if b["type"] != "text"
    ]
    assert blocks == [
        ("tool_use", "call_A"),
        ("tool_result", "call_A"),
        ("tool_use", "call_A_2"),
        ("tool_result", "call_A_2"),
    ]


def test_gemini_gets_unique_function_call_ids_each_response_following_its_call(gemini_fake):
    host_chat(get_provider().name, "sys", [], REUSED, max_tokens=100)

    (request,) = gemini_fake.requests_for("gemini.generate")
    parts = [
        (kind, p[kind]["id"])
        for c in request.body["contents"]
        for p in c["parts"]
        for kind in p
        if kind != "text"
    ]
    assert parts == [
        ("functionCall", "call_A"),
        ("functionResponse", "call_A"),
        ("functionCall", "call_A_2"),
        ("functionResponse", "call_A_2"),
    ]


def test_anthropic_gets_call_ids_in_the_characters_it_accepts(anthropic_fake):
    messages = [
        {"role": "user", "content": "Look it up"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "functions.search:0", "name": "search", "arguments": {}}],
        },
        {
            "role": "tool",
            "content": "ok",
            "tool_call_id": "functions.search:0",
            "tool_name": "search",
        },
    ]

    host_chat(get_provider().name, "sys", [], messages, max_tokens=100)

    (request,) = anthropic_fake.requests_for("anthropic.messages")
    assert request.body["messages"][1]["content"][0]["id"] == "functions_search_0"
    assert request.body["messages"][2]["content"][0]["tool_use_id"] == "functions_search_0"


def test_a_gemini_function_call_without_an_id_gets_one_that_goes_back_with_its_result(
    gemini_fake, conversation
):
    gemini_fake.script_gemini(
        ok(text="", tool_calls=[{"name": "search", "arguments": {"q": "x"}}]), ok(text="Done.")
    )
    provider = get_provider()
    add_message(conversation, "user", "Find x")

    reply = host_chat(
        provider.name, "sys", [], build_context(conversation).messages, max_tokens=100
    )
    (call,) = reply.tool_calls
    add_message(conversation, "assistant", reply.text, tool_calls=reply.tool_calls)
    add_message(conversation, "tool", "x is 42", tool_call_id=call["id"])
    host_chat(provider.name, "sys", [], build_context(conversation).messages, max_tokens=100)

    assert re.fullmatch(r"call_[0-9a-f]{24}", call["id"])
    second = gemini_fake.requests_for("gemini.generate")[1].body["contents"]
    assert second[1]["parts"] == [
        {"functionCall": {"id": call["id"], "name": "search", "args": {"q": "x"}}}
    ]
    assert second[2]["parts"][0]["functionResponse"]["id"] == call["id"]


@pytest.mark.parametrize("path", sorted(REAL.glob("taubench-*.jsonl")), ids=lambda p: p.stem)
def test_a_real_conversation_with_reused_ids_is_accepted_by_both_providers(
    fake_llm, settings, conversation, path
):
    for line in path.read_text().splitlines():
        message = json.loads(line)
        fields = {key: message[key] for key in ("tool_calls", "tool_call_id") if message.get(key)}
        add_message(conversation, message["role"], message["content"], **fields)
    context = build_context(conversation)

    fake_llm.use_anthropic(settings)
    anthropic_reply = host_chat(
        get_provider().name, context.system, context.summaries, context.messages, max_tokens=100
    )
    fake_llm.use_gemini(settings)
    gemini_reply = host_chat(
        get_provider().name, context.system, context.summaries, context.messages, max_tokens=100
    )

    assert (anthropic_reply.stop_reason, gemini_reply.stop_reason) == ("end_turn", "STOP")
    anthropic_ids = [
        b["id"]
        for m in fake_llm.requests_for("anthropic.messages")[0].body["messages"]
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    assert (
        len(anthropic_ids)
        == len(set(anthropic_ids))
        == sum(len(m.get("tool_calls") or []) for m in context.messages)
    )


def test_an_openai_cached_suffix_summary_sends_the_chat_request_then_the_instruction(
    settings, fake_llm
):
    fake_llm.use_openai(settings)
    request = CachedRequest(
        system="System prompt",
        summaries=["old summary"],
        messages=MESSAGES,
        instruction="Summarize the conversation so far.",
        transcript=TRANSCRIPT,
        tools=TOOLS,
    )

    result = get_provider().summarize_cached(request)

    (sent,) = fake_llm.requests_for("openai.chat")
    body = sent.body
    assert body["model"] == "gpt-4.1"  # the chat model: its cache holds the request
    assert body["messages"][0] == {"role": "system", "content": "System prompt\n\nold summary"}
    assert body["messages"][-1] == {"role": "user", "content": "Summarize the conversation so far."}
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "user",
    ]
    # The tools keep the cached prefix; the answer is the summary, not a call.
    assert [t["function"]["name"] for t in body["tools"]] == ["get_blog_post"]
    assert body["tool_choice"] == "none"
    assert (result.provider, result.fallback) == ("openai", False)
