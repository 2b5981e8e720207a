"""Context-overflow detection, through the real SDK exceptions raised against the fake."""

import pytest

from assistant.emergency.levels import note_response
from assistant.providers import ChatResult, ProviderError, Usage, context_overflow, get_provider
from assistant.providers.catalog import model_context_window
from assistant.providers.overflow import overflow_token_counts
from tests.fake_llm import fake_llm, ok, overflow, overloaded, raw
from tests.host_chat import host_chat

__all__ = ["fake_llm"]  # the fixture, until conftest loads tests.fake_llm as a plugin


def _anthropic_error(kind, message):
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}


def _openai_error(message, code=None, kind="invalid_request_error"):
    return {"error": {"message": message, "type": kind, "param": "messages", "code": code}}


OVERFLOWS = {
    "anthropic prompt too long": ("anthropic", overflow()),
    "gemini input token count": ("gemini", overflow()),
    "openai maximum context length": (
        "anthropic",
        raw(
            400,
            _openai_error(
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9000 tokens. Please reduce the length of the messages.",
                code="context_length_exceeded",
            ),
        ),
    ),
    "openai code only": (
        "anthropic",
        raw(400, _openai_error("Invalid request.", code="context_length_exceeded")),
    ),
    "openai reduce the length": (
        "anthropic",
        raw(400, _openai_error("Please reduce the length of the messages or completion.")),
    ),
    "litellm ContextWindowExceededError": (
        "anthropic",
        raw(
            400,
            _openai_error(
                "litellm.ContextWindowExceededError: litellm.BadRequestError: "
                "AnthropicException - prompt is too long",
                code="400",
            ),
        ),
    ),
    "proxy context window exceeded": (
        "anthropic",
        raw(400, {"error": {"message": "context window exceeded for model x"}}),
    ),
    "proxy too many tokens": (
        "anthropic",
        raw(400, {"error": {"message": "Request has too many tokens for this model"}}),
    ),
    "bedrock input is too long": (
        "anthropic",
        raw(400, {"message": "Input is too long for requested model."}),
    ),
    "proxy exceeds the context window": (
        "gemini",
        raw(
            400,
            {
                "error": {
                    "code": 400,
                    "message": "The prompt exceeds the context window of this model.",
                    "status": "INVALID_ARGUMENT",
                }
            },
        ),
    ),
}


def _server_error(message, **extra):
    """The {"error": {...}} body most OpenAI-compatible servers send."""
    return {"error": {"message": message, "code": 400, **extra}}


ANTHROPIC_INPUT_AND_MAX_TOKENS = (
    "input length and `max_tokens` exceed context limit: 195000 + 8192 > 200000, "
    "decrease input length or `max_tokens` and try again"
)
# Other servers users put behind OpenAI-compatible endpoints, in their own words.
OVERFLOWS |= {
    "anthropic input length and max_tokens": (
        "anthropic",
        raw(400, _anthropic_error("invalid_request_error", ANTHROPIC_INPUT_AND_MAX_TOKENS)),
    ),
    "vllm input tokens": (
        "anthropic",
        raw(
            400,
            _server_error(
                "This model's maximum context length is 32768 tokens. However, your request "
                "has 33000 input tokens. Please reduce the length of the input messages.",
                type="BadRequestError",
            ),
        ),
    ),
    "llama.cpp server": (
        "anthropic",
        raw(
            400,
            _server_error(
                "request (4476 tokens) exceeds the available context size (4096 tokens)",
                type="exceed_context_size_error",
                n_prompt_tokens=4476,
                n_ctx=4096,
            ),
        ),
    ),
    "ollama": (
        "anthropic",
        raw(400, {"error": "prompt too long; exceeded max context length by 4096 tokens"}),
    ),
    "mistral": (
        "anthropic",
        raw(
            400,
            {
                "object": "error",
                "message": "Prompt contains 300000 tokens, too large for model with 131072 "
                "maximum context length",
                "type": "invalid_request_error",
            },
        ),
    ),
    "openrouter": (
        "anthropic",
        raw(
            400,
            _server_error(
                "This endpoint's maximum context length is 65536 tokens. However, you "
                "requested about 92208 tokens (60833 of text input, 10042 of tool input, 21333 "
                'in the output). Please reduce the length of either one, or use the "middle-out"'
                " transform to compress your prompt automatically."
            ),
        ),
    ),
    "deepseek": (
        "anthropic",
        raw(
            400,
            _openai_error(
                "This model's maximum context length is 65536 tokens. However, you requested "
                "70000 tokens (70000 in the messages, 0 in the completion). Please reduce the "
                "length of the messages or completion."
            ),
        ),
    ),
    "azure openai": (
        "anthropic",
        raw(
            400,
            _openai_error(
                "This model's maximum context length is 128000 tokens. However, your messages "
                "resulted in 204308 tokens. Please reduce the length of the messages.",
                code="context_length_exceeded",
            ),
        ),
    ),
    "openai responses": (
        "anthropic",
        raw(
            400,
            _openai_error(
                "Your input exceeds the context window of this model. Please adjust your input "
                "and try again.",
                code="context_length_exceeded",
            ),
        ),
    ),
    "xai": (
        "anthropic",
        raw(
            400,
            _server_error(
                "This model's maximum prompt length is 131072 but the request contains 537812 "
                "tokens."
            ),
        ),
    ),
    "together": (
        "anthropic",
        raw(
            400,
            _server_error(
                "The input (265330 tokens) is longer than the model's context length (262144 "
                "tokens)."
            ),
        ),
    ),
    "huggingface tgi": (
        "anthropic",
        raw(
            422,
            {
                "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be "
                "<= 2048. Given: 1244 `inputs` tokens and 1000 `max_new_tokens`",
                "error_type": "validation",
            },
        ),
    ),
    "kimi": (
        "anthropic",
        raw(
            400,
            _server_error("Your request exceeded model token limit: 262144 (requested: 300000)"),
        ),
    ),
    "lm studio": (
        "anthropic",
        raw(
            400,
            _server_error(
                "The number of tokens to keep from the initial prompt is greater than the "
                "context length."
            ),
        ),
    ),
}

LOOK_ALIKES = {
    "anthropic 429 token rate limit": (
        "anthropic",
        raw(
            429,
            _anthropic_error(
                "rate_limit_error",
                "This request would exceed your organization's rate limit of 30,000 input "
                "tokens per minute.",
            ),
            {"retry-after-ms": "1"},
        ),
    ),
    "openai 429 tokens per min": (
        "anthropic",
        raw(
            429,
            _openai_error(
                "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, "
                "Used 29000, Requested 2000.",
                code="rate_limit_exceeded",
                kind="tokens",
            ),
            {"retry-after-ms": "1"},
        ),
    ),
    "a 400 about too many tokens per minute": (
        "anthropic",
        raw(400, {"error": {"message": "too many tokens per minute for this key"}}),
    ),
    "gemini 429 quota": (
        "gemini",
        raw(
            429,
            {
                "error": {
                    "code": 429,
                    "message": "Quota exceeded for input tokens per minute.",
                    "status": "RESOURCE_EXHAUSTED",
                }
            },
        ),
    ),
    "anthropic output token cap": (
        "anthropic",
        raw(
            400,
            _anthropic_error(
                "invalid_request_error",
                "max_tokens: 100000 > 64000, which is the maximum allowed number of output "
                "tokens for claude-sonnet-4-5",
            ),
        ),
    ),
    "anthropic 413 request too large": (
        "anthropic",
        raw(
            413,
            _anthropic_error(
                "request_too_large", "Request exceeds the maximum allowed number of bytes."
            ),
        ),
    ),
    "anthropic 529 overloaded": ("anthropic", overloaded()),
    "anthropic 500 prompt wording": (
        "anthropic",
        raw(500, _anthropic_error("api_error", "prompt is too long to log")),
    ),
    "gemini 503 unavailable": ("gemini", overloaded()),
    "bedrock throttle worded as too many tokens": (
        "anthropic",
        raw(
            400, {"message": "Throttling error: Too many tokens, please wait before trying again."}
        ),
    ),
    "proxy token limit for this minute": (
        "anthropic",
        raw(400, _server_error("Rate limit reached: too many tokens for this minute")),
    ),
    "openai output cap": (
        "anthropic",
        raw(
            400,
            _openai_error(
                "max_tokens is too large: 100000. This model supports at most 16384 completion "
                "tokens, whereas you provided 100000."
            ),
        ),
    ),
    "groq 413 tokens per minute": (
        "anthropic",
        raw(
            413,
            _openai_error(
                "Request too large for model `llama-3.3-70b-versatile` on tokens per minute "
                "(TPM): Limit 6000, Requested 7000, please reduce your message size and try "
                "again.",
                code="rate_limit_exceeded",
                kind="tokens",
            ),
        ),
    ),
    "anthropic unrelated 400": (
        "anthropic",
        raw(400, _anthropic_error("invalid_request_error", "messages: roles must alternate")),
    ),
}


def _sdk_error(fake, settings, provider_name, reply):
    """The real SDK exception the provider raised for `reply`."""
    settings.LLM_MAX_RETRIES = 0
    if provider_name == "anthropic":
        fake.use_anthropic(settings)
        fake.script_summaries(reply)
    else:
        fake.use_gemini(settings)
        fake.script_summaries(reply)
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    with pytest.raises(ProviderError) as raised:
        get_provider().summarize("[user] hi")
    return raised.value


@pytest.mark.parametrize(("provider_name", "reply"), OVERFLOWS.values(), ids=OVERFLOWS.keys())
def test_each_overflow_wording_is_detected_through_the_real_sdk_error(
    fake_llm, settings, provider_name, reply
):
    error = _sdk_error(fake_llm, settings, provider_name, reply)

    assert context_overflow(error.__cause__) is True
    assert context_overflow(error) is True
    assert error.overflow is True


@pytest.mark.parametrize(("provider_name", "reply"), LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_each_look_alike_is_not_an_overflow(fake_llm, settings, provider_name, reply):
    error = _sdk_error(fake_llm, settings, provider_name, reply)

    assert context_overflow(error.__cause__) is False
    assert context_overflow(error) is False


def test_a_timeout_is_not_an_overflow(fake_llm, settings):
    from tests.fake_llm import slow

    settings.LLM_TIMEOUT_SECONDS = 0.3
    error = _sdk_error(fake_llm, settings, "anthropic", slow(1.0))

    assert type(error.__cause__).__name__ == "APITimeoutError"
    assert context_overflow(error) is False


@pytest.mark.parametrize(
    "error",
    [RuntimeError("boom"), ValueError("bad value"), KeyError("prompt"), None],
)
def test_plain_exceptions_are_not_overflows(error):
    assert context_overflow(error) is False


def test_a_proxy_exception_class_named_context_window_exceeded_is_an_overflow():
    class ContextWindowExceededError(Exception):
        pass

    assert context_overflow(ContextWindowExceededError("litellm says no")) is True


def test_the_stop_reason_model_context_window_exceeded_is_an_overflow(
    fake_llm, settings, conversation
):
    fake_llm.use_anthropic(settings)
    fake_llm.script_anthropic(ok(text="partial", stop_reason="model_context_window_exceeded"))
    provider = get_provider()

    reply = host_chat(provider.name, "sys", [], [{"role": "user", "content": "hi"}], max_tokens=10)

    assert note_response(conversation, reply) is True


def test_a_summary_stopped_at_the_window_raises_an_overflow(fake_llm, settings):
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    fake_llm.use_anthropic(settings)
    fake_llm.script_summaries(ok(stop_reason="model_context_window_exceeded"))

    with pytest.raises(ProviderError) as raised:
        get_provider().summarize("[user] hi")

    assert context_overflow(raised.value) is True


@pytest.mark.parametrize(
    ("usage", "model", "expected"),
    [
        (Usage(input_tokens=150_000, cache_read_tokens=50_001), "claude-sonnet-4-5", True),
        (Usage(input_tokens=150_000, cache_read_tokens=50_000), "claude-sonnet-4-5", False),
        (Usage(input_tokens=1_048_577), "gemini-2.5-flash", True),
        (Usage(input_tokens=1_048_576), "gemini-2.5-flash", False),
    ],
)
def test_a_response_reporting_more_prompt_tokens_than_the_window_is_an_overflow(
    usage, model, expected, conversation
):
    response = ChatResult(text="", usage=usage, model=model, stop_reason="end_turn")

    assert note_response(conversation, response) is expected


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-3-5-sonnet-20241022", 200_000),
        ("claude-3-7-sonnet-latest", 200_000),
        ("claude-sonnet-4-5", 200_000),
        ("claude-opus-4-1", 200_000),
        ("claude-haiku-4-5", 200_000),
        ("claude-sonnet-4-5[1m]", 1_000_000),
        ("gemini-1.5-pro-002", 2_097_152),
        ("gemini-1.5-flash", 1_048_576),
        ("gemini-2.0-flash", 1_048_576),
        ("models/gemini-2.5-flash-lite", 1_048_576),
        ("gemini-3-pro-preview", 1_048_576),
    ],
)
def test_the_model_window_table(model, window):
    assert model_context_window(model) == window


def test_an_unknown_model_gets_the_configured_default(settings):
    settings.ASSISTANT_DEFAULT_CONTEXT_WINDOW = 32_000

    assert model_context_window("my-local-llama") == 32_000


@pytest.mark.parametrize(
    ("message", "counts"),
    [
        ("prompt is too long: 208310 tokens > 200000 maximum", (208310, 200000)),
        (ANTHROPIC_INPUT_AND_MAX_TOKENS, (195000, 191808)),
        (
            "The input token count (1200293) exceeds the maximum number of tokens allowed "
            "(1048576).",
            (1200293, 1048576),
        ),
        (
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens. Please reduce the length of the messages.",
            (9000, 8192),
        ),
        (
            "This model's maximum context length is 4097 tokens, however you requested 4231 "
            "tokens (3975 in your prompt; 256 for the completion).",
            (3975, 3841),
        ),
        (
            "This endpoint's maximum context length is 65536 tokens. However, you requested "
            "about 92208 tokens (60833 of text input, 10042 of tool input, 21333 in the output).",
            (70875, 44203),
        ),
        (
            "This model's maximum context length is 32768 tokens. However, your request has "
            "33000 input tokens.",
            (33000, 32768),
        ),
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum "
            "context length is 4096 tokens and your request has 2104 input tokens "
            "(2000 > 4096 - 2104).",
            (2104, 2096),
        ),
        ("request (4476 tokens) exceeds the available context size (4096 tokens)", (4476, 4096)),
        (
            "Prompt contains 300,000 tokens, too large for model with 131,072 maximum context "
            "length",
            (300000, 131072),
        ),
        (
            "This model's maximum prompt length is 131072 but the request contains 537812 tokens",
            (537812, 131072),
        ),
        ("Your request exceeded model token limit: 262144 (requested: 300000)", (300000, 262144)),
        (
            "`inputs` tokens + `max_new_tokens` must be <= 2048. Given: 1244 `inputs` tokens and "
            "1000 `max_new_tokens`",
            (1244, 1048),
        ),
        ("prompt too long; exceeded max context length by 4096 tokens", None),
        ("Rate limit reached for tokens per min", None),
    ],
)
def test_overflow_token_counts_reads_each_servers_wording(message, counts):
    assert overflow_token_counts(RuntimeError(message)) == counts


def test_the_counts_of_anthropics_input_and_max_tokens_overflow_come_through_the_sdk(
    fake_llm, settings
):
    reply = raw(400, _anthropic_error("invalid_request_error", ANTHROPIC_INPUT_AND_MAX_TOKENS))

    error = _sdk_error(fake_llm, settings, "anthropic", reply)

    assert (error.overflow, overflow_token_counts(error)) == (True, (195000, 191808))
