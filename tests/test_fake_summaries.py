"""The testing kit scripts summary requests apart from chat
requests, in Python (`FakeProvider.script_summaries`) and over HTTP
(`POST /_fake/script` with "summaries"); its `--help` names every wire it serves."""

import json
import subprocess
import sys
import urllib.request

import anthropic
import openai
import pytest
from google import genai

from assistant.providers import summarize
from assistant.testing.fake_provider import (
    DEFAULT_SUMMARY,
    PROVIDER_KINDS,
    FakeProvider,
    ok,
    overloaded,
)

TRANSCRIPT = "[user] Fix post-17.\n[assistant] Post-17 is fixed."
CALL = {"id": "toolu_1", "name": "get_post", "arguments": {"id": 17}}
SUMMARY = (
    "## Goal\n- fix post-17\n\n## Constraints\n- none\n\n## Progress\n- none\n\n"
    "## Key decisions\n- none\n\n## Next steps\n- none\n\n## Critical context\n- post-17"
)


def chat_call(fake):
    client = anthropic.Anthropic(api_key="test-key", base_url=fake.url)
    return client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "Fix post 17."}],
    )


def post(fake, path, data):
    request = urllib.request.Request(fake.url + path, data=json.dumps(data).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_summary_request_never_takes_the_chats_scripted_tool_call(fake_llm, settings):
    fake_llm.use_anthropic(settings)
    fake_llm.script_anthropic(ok(tool_calls=[CALL]), ok("Fixed."))

    summary = summarize(TRANSCRIPT)
    first, second = chat_call(fake_llm), chat_call(fake_llm)

    assert (summary.text, summary.fallback) == (DEFAULT_SUMMARY, False)
    assert [block.type for block in first.content] == ["tool_use"]
    assert second.content[0].text == "Fixed."
    assert [r.summary for r in fake_llm.requests] == [True, False, False]


def test_scripted_summaries_answer_summary_requests_only(fake_llm, settings):
    fake_llm.use_anthropic(settings)
    fake_llm.script_summaries(ok(SUMMARY))

    answer = chat_call(fake_llm)
    summary = summarize(TRANSCRIPT)
    default = summarize(TRANSCRIPT)

    assert answer.content[0].text == "This is the fake provider's answer."
    assert summary.text == SUMMARY
    assert default.text == DEFAULT_SUMMARY  # the summary queue is empty again


def test_a_wires_summaries_go_first_then_any_wires_and_repeat_cycles(fake_llm, settings):
    fake_llm.use_gemini(settings)
    fake_llm.script_summaries(ok(SUMMARY.replace("post-17", "any-wire")), repeat=True)
    fake_llm.script_summaries(ok(SUMMARY), provider="gemini")
    fake_llm.script_summaries(overloaded(), provider="anthropic")  # another wire's

    texts = [summarize(TRANSCRIPT).text for _ in range(3)]

    assert texts[0] == SUMMARY
    assert texts[1] == texts[2] == SUMMARY.replace("post-17", "any-wire")
    assert fake_llm.count("gemini.generate") == 3


def test_an_openai_summary_is_scripted_by_its_provider_name(fake_llm, settings):
    fake_llm.use_openai(settings)
    fake_llm.script_summaries(ok(SUMMARY), provider="openai")
    fake_llm.script_openai(ok("A chat answer."))

    assert summarize(TRANSCRIPT).text == SUMMARY
    client = openai.OpenAI(api_key="test-key", base_url=fake_llm.openai_url)
    chat = client.chat.completions.create(
        model="gpt-4.1", messages=[{"role": "user", "content": "Hello."}]
    )
    assert chat.choices[0].message.content == "A chat answer."


def test_summaries_are_scripted_over_http_and_listed_as_summary_requests(fake_llm, settings):
    fake_llm.use_anthropic(settings)
    script = {
        "provider": "anthropic",
        "replies": [{"tool_calls": [CALL]}],
        "summaries": [{"text": SUMMARY}],
    }

    assert post(fake_llm, "/_fake/script", script) == (200, {"queued": 2})
    assert post(fake_llm, "/_fake/script", {"summaries": [{"error": "overloaded"}]}) == (
        200,
        {"queued": 1},
    )
    summary = summarize(TRANSCRIPT)
    answer = chat_call(fake_llm)

    assert summary.text == SUMMARY
    assert [block.type for block in answer.content] == ["tool_use"]
    with urllib.request.urlopen(fake_llm.url + "/_fake/requests", timeout=30) as response:
        listed = json.loads(response.read())
    assert [r["summary"] for r in listed] == [True, False]
    # The any-wire overloaded reply is still queued: reset forgets it.
    assert post(fake_llm, "/_fake/reset", {}) == (200, {"reset": True})
    assert summarize(TRANSCRIPT).text == DEFAULT_SUMMARY


@pytest.mark.parametrize(
    "script",
    [
        {"provider": "anthropic"},
        {"summaries": "not a list"},
        {"provider": "mistral", "summaries": [{"text": "x"}]},
        {"summaries": [{"text": "x", "colour": "red"}]},
    ],
)
def test_a_malformed_summary_script_is_refused_and_queues_nothing(fake_llm, script):
    status, body = post(fake_llm, "/_fake/script", [{"summaries": [{"text": "kept?"}]}, script])

    assert status == 400
    assert body["error"]["code"] == 400
    with pytest.raises(ValueError):
        fake_llm.script_summaries(ok(), provider="mistral")
    assert not fake_llm._summaries[None]


def test_the_help_names_every_wire_and_its_base_url():
    result = subprocess.run(
        [sys.executable, "-m", "assistant.testing.fake_provider", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = " ".join(result.stdout.split())
    for wire in ("Anthropic", "Chat Completions", "Responses API", "generateContent"):
        assert wire in text
    assert "Interactions API" in text
    # Every wire the fake scripts, by the name POST /_fake/script takes.
    for provider in PROVIDER_KINDS:
        assert f'"{provider}"' in text, provider
    assert "base_url: http://HOST:PORT/v1" in text
    assert '"summaries": [...]' in text


def test_gemini_sdk_reaches_the_fake_at_its_documented_base_url():
    fake = FakeProvider().start()
    try:
        client = genai.Client(api_key="test-key", http_options={"base_url": fake.url})
        answer = client.models.generate_content(model="gemini-2.5-flash", contents="Hello.")
        assert answer.text == "This is the fake provider's answer."
    finally:
        fake.stop()
