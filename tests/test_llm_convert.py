"""Neutral messages to Anthropic and Gemini request shapes."""

import json

import pytest

from assistant.providers.convert import (
    MAX_CACHE_BREAKPOINTS,
    InvalidRequest,
    check_anthropic_messages,
    to_anthropic,
    to_gemini,
)

EPHEMERAL = {"type": "ephemeral"}

MESSAGES = [
    {"role": "user", "content": "Compare posts 7 and 8"},
    {
        "role": "assistant",
        "content": "Fetching both.",
        "tool_calls": [
            {"id": "call_1", "name": "get_blog_post", "arguments": {"id": 7}},
            {"id": "call_2", "name": "get_blog_post", "arguments": {"id": 8}},
        ],
    },
    {"role": "tool", "content": "post 7", "tool_call_id": "call_1", "tool_name": "get_blog_post"},
    {"role": "tool", "content": "post 8", "tool_call_id": "call_2", "tool_name": "get_blog_post"},
    {"role": "assistant", "content": "Post 7 is longer."},
    {"role": "user", "content": "Thanks."},
    {"role": "user", "content": "And the titles?"},
]


def _breakpoints(request):
    return json.dumps(request).count('"cache_control"')


def test_anthropic_gets_tool_use_and_one_user_message_of_tool_results():
    request = to_anthropic("You are a blog assistant.", ["## Goal\n- compare"], MESSAGES)

    assert request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Compare posts 7 and 8"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Fetching both."},
                {"type": "tool_use", "id": "call_1", "name": "get_blog_post", "input": {"id": 7}},
                {"type": "tool_use", "id": "call_2", "name": "get_blog_post", "input": {"id": 8}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "post 7"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "post 8"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Post 7 is longer."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Thanks."},
                {"type": "text", "text": "And the titles?", "cache_control": EPHEMERAL},
            ],
        },
    ]


def test_anthropic_system_and_summary_blocks_carry_cache_breakpoints():
    request = to_anthropic("You are a blog assistant.", ["first summary", "second"], MESSAGES)

    assert request["system"] == [
        {"type": "text", "text": "You are a blog assistant.", "cache_control": EPHEMERAL},
        {"type": "text", "text": "first summary"},
        {"type": "text", "text": "second", "cache_control": EPHEMERAL},
    ]
    assert _breakpoints(request) == 3
    assert _breakpoints(request) <= MAX_CACHE_BREAKPOINTS


def test_anthropic_puts_tool_results_before_text_when_a_user_message_follows_them():
    messages = [
        MESSAGES[0],
        MESSAGES[1],
        {"role": "tool", "content": "post 7", "tool_call_id": "call_1", "tool_name": "t"},
        {"role": "user", "content": "and?"},
        {"role": "tool", "content": "post 8", "tool_call_id": "call_2", "tool_name": "t"},
    ]

    last = to_anthropic("", [], messages)["messages"][-1]

    assert [b["type"] for b in last["content"]] == ["tool_result", "tool_result", "text"]


def test_gemini_gets_function_call_and_function_response_parts():
    request = to_gemini("You are a blog assistant.", ["## Goal\n- compare"], MESSAGES)

    assert request["system_instruction"] == "You are a blog assistant.\n\n## Goal\n- compare"
    assert request["contents"] == [
        {"role": "user", "parts": [{"text": "Compare posts 7 and 8"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Fetching both."},
                {"function_call": {"id": "call_1", "name": "get_blog_post", "args": {"id": 7}}},
                {"function_call": {"id": "call_2", "name": "get_blog_post", "args": {"id": 8}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "function_response": {
                        "id": "call_1",
                        "name": "get_blog_post",
                        "response": {"result": "post 7"},
                    }
                },
                {
                    "function_response": {
                        "id": "call_2",
                        "name": "get_blog_post",
                        "response": {"result": "post 8"},
                    }
                },
            ],
        },
        {"role": "model", "parts": [{"text": "Post 7 is longer."}]},
        {"role": "user", "parts": [{"text": "Thanks."}, {"text": "And the titles?"}]},
    ]


def test_empty_messages_are_left_out():
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]

    assert to_anthropic("", [], messages) == {
        "system": [],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}],
            }
        ],
    }
    assert to_gemini("", [], messages)["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


CALL_A = {"id": "a", "name": "search", "arguments": {}}
RESULT_A = {"role": "tool", "content": "found", "tool_call_id": "a", "tool_name": "search"}
THINKING = {"type": "thinking", "thinking": "Nothing to add.", "signature": "sig-1"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgB"}


def test_an_answer_that_was_all_thinking_is_left_out_with_nothing_after_it():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [CALL_A]},
        RESULT_A,
        {"role": "assistant", "content": "", "blocks": [THINKING, REDACTED]},
    ]

    anthropic = to_anthropic("", [], messages)["messages"]
    gemini = to_gemini("", [], messages)["contents"]

    assert [(m["role"], [b["type"] for b in m["content"]]) for m in anthropic] == [
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
    ]
    assert [(c["role"], [next(iter(p)) for p in c["parts"]]) for c in gemini] == [
        ("user", ["text"]),
        ("model", ["function_call"]),
        ("user", ["function_response"]),
    ]


def test_an_all_thinking_answer_opens_the_assistant_message_after_it():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "blocks": [THINKING]},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": "Searching.", "tool_calls": [CALL_A]},
        RESULT_A,
    ]

    anthropic = to_anthropic("", [], messages)["messages"]

    assert anthropic[1] == {
        "role": "assistant",
        "content": [
            THINKING,
            {"type": "text", "text": "Searching."},
            {"type": "tool_use", "id": "a", "name": "search", "input": {}},
        ],
    }
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user"]


def test_an_empty_answer_between_two_user_messages_leaves_one_user_turn():
    messages = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "", "blocks": [THINKING]},
        {"role": "user", "content": "Are you there?"},
    ]

    anthropic = to_anthropic("", [], messages)["messages"]
    gemini = to_gemini("", [], messages)["contents"]

    assert anthropic == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Hello"},
                {"type": "text", "text": "Are you there?", "cache_control": EPHEMERAL},
            ],
        }
    ]
    assert gemini == [{"role": "user", "parts": [{"text": "Hello"}, {"text": "Are you there?"}]}]


def test_an_assistant_message_ending_with_thinking_is_refused_by_the_check():
    request = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hm."}, THINKING]},
    ]

    with pytest.raises(InvalidRequest, match=r"messages\[1\] ends with a thinking block"):
        check_anthropic_messages(request)


BROKEN = {
    "an empty first user message": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Fix post 42"},
    ],
    "a result without its call": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "On it."},
        RESULT_A,
    ],
    "a call without its result at the end": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [CALL_A]},
    ],
    "a result after a later turn": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [CALL_A]},
        {"role": "user", "content": "Anything?"},
        {"role": "assistant", "content": "Still waiting."},
        RESULT_A,
    ],
}


@pytest.mark.parametrize("messages", BROKEN.values(), ids=BROKEN.keys())
def test_a_request_a_provider_would_refuse_is_never_built(messages):
    with pytest.raises(InvalidRequest):
        to_anthropic("", [], messages)
    with pytest.raises(InvalidRequest):
        to_gemini("", [], messages)


def test_whitespace_beside_tool_calls_is_left_out_and_the_request_stays_valid():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "\n\n", "tool_calls": [CALL_A]},
        RESULT_A,
    ]

    anthropic = to_anthropic("", [], messages)["messages"]
    gemini = to_gemini("", [], messages)["contents"]

    assert [b["type"] for b in anthropic[1]["content"]] == ["tool_use"]
    assert [list(p) for p in gemini[1]["parts"]] == [["function_call"]]


def test_a_reused_id_is_renamed_in_the_call_and_its_result_alike():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [CALL_A]},
        RESULT_A,
        {"role": "assistant", "content": "", "tool_calls": [CALL_A, {**CALL_A, "id": "a_2"}]},
        RESULT_A,
        {**RESULT_A, "tool_call_id": "a_2"},
    ]

    request = to_anthropic("", [], messages)["messages"]

    ids = [(b["type"], b.get("id") or b.get("tool_use_id")) for m in request for b in m["content"]]
    assert ids[1:] == [
        ("tool_use", "a"),
        ("tool_result", "a"),
        ("tool_use", "a_2"),
        ("tool_use", "a_2_2"),
        ("tool_result", "a_2"),
        ("tool_result", "a_2_2"),
    ]
