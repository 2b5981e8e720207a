"""Nothing compacted is out of the model's reach: handles in what the model sees, the
artifact index in the window summary, and the recall tools answering the model."""

from __future__ import annotations

import re

import anthropic as anthropic_sdk
import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from google import genai
from google.genai import types

from assistant import recall
from assistant.models import Conversation, Message
from assistant.recall import recall_result_cap, run_tool_call, tool_definitions
from assistant.recall.artifact_index import without_index
from assistant.services import (
    add_message,
    answer_tool_calls,
    build_context,
    chat_step,
    compact_tool_results,
    ensure_context_summary,
    fork_from_message,
)
from assistant.settings.conf import compaction_config
from assistant.text.names import definitions
from tests.builders import html, tool_turn
from tests.fake_llm import ok
from tests.scenarios import staff_user

SECRET_ROW = "The webhook secret for the autumn newsletter is ORCHID-7731-QX."


def compacted_lookup(conversation: Conversation) -> Message:
    """A finished turn whose 6,000-character result holds SECRET_ROW deep inside, compacted."""
    page = html(3000) + SECRET_ROW + html(3000)
    turn = tool_turn(
        conversation, "Show the newsletter settings", [("get_settings", {"id": 7}, page)]
    )
    assert compact_tool_results(conversation) == 1
    return Message.objects.get(pk=turn[2].pk)


def send(provider: str, fake_llm, conversation: Conversation):
    """The next request through the real SDK, with the recall tools beside the host's."""
    context = build_context(conversation)
    if provider == "anthropic":
        client = anthropic_sdk.Anthropic(api_key="k", base_url=fake_llm.url, max_retries=0)
        response = client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=512,
            tools=tool_definitions("anthropic"),
            **context.to_anthropic(),
        )
        return [
            {"id": block.id, "name": block.name, "arguments": block.input}
            for block in response.content
            if block.type == "tool_use"
        ]
    client = genai.Client(
        api_key="k", http_options=types.HttpOptions(base_url=fake_llm.url, api_version="v1beta")
    )
    request = context.to_gemini()
    response = client.models.generate_content(
        model="gemini-2.5-flash",
        contents=request["contents"],
        config=types.GenerateContentConfig(
            system_instruction=request["system_instruction"],
            tools=tool_definitions("gemini"),
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        ),
    )
    return [
        {"id": call.id, "name": call.name, "arguments": dict(call.args or {})}
        for call in response.function_calls or []
    ]


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_a_recall_tool_use_is_answered_and_the_next_request_is_valid(provider, fake_llm, db):
    conversation = Conversation.objects.create(title="Newsletter", system_prompt="You help.")
    result = compacted_lookup(conversation)
    assert f"(ref m{result.pk})" in result.compacted_content
    assert "ORCHID-7731-QX" not in result.compacted_content
    add_message(conversation, "user", "What was the autumn webhook secret again?")
    call = {"id": "call_recall_1", "name": "recall", "arguments": {"handle": f"m{result.pk}"}}
    fake_llm.script(
        "anthropic.messages" if provider == "anthropic" else "gemini.generate",
        ok(tool_calls=[call]),
        ok(text="It is ORCHID-7731-QX."),
    )

    calls = send(provider, fake_llm, conversation)
    add_message(conversation, "assistant", "", tool_calls=calls)
    answer = run_tool_call(conversation, calls[0]["name"], calls[0]["arguments"])
    add_message(conversation, "tool", answer, tool_call_id=calls[0]["id"])
    assert send(provider, fake_llm, conversation) == []  # the server accepted the request

    first, second = (r.body for r in fake_llm.requests)
    if provider == "anthropic":
        assert [t["name"] for t in first["tools"]] == ["recall", "search_history"]
        sent = second["messages"][-1]["content"][0]
        assert sent["type"] == "tool_result" and sent["tool_use_id"] == "call_recall_1"
        assert SECRET_ROW in sent["content"]
    else:
        declared = first["tools"][0]["functionDeclarations"]
        assert [d["name"] for d in declared] == ["recall", "search_history"]
        response = second["contents"][-1]["parts"][0]["functionResponse"]
        assert response["name"] == "recall"
        assert SECRET_ROW in str(response["response"])
    assert answer.splitlines()[0] == (
        f'[ref m{result.pk} · tool result of get_settings {{"id": 7}} · 6,063 characters · '
        "showing 0-6,063]"
    )
    assert Conversation.objects.get(pk=conversation.pk).recall_count == 1


HOST_TOOLS = [
    {
        "name": "get_settings",
        "description": "The newsletter settings by id.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
    }
]


def sdk_call(provider: str, fake_llm):
    if provider == "anthropic":
        client = anthropic_sdk.Anthropic(api_key="k", base_url=fake_llm.url, max_retries=0)
        return lambda request: client.messages.create(
            model="claude-sonnet-4-6", max_tokens=512, **request
        )
    options = types.HttpOptions(base_url=fake_llm.url, api_version="v1beta")
    client = genai.Client(api_key="k", http_options=options)
    return lambda request: client.models.generate_content(model="gemini-2.5-flash", **request)


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_chat_step_offers_the_recall_tools_and_answer_tool_calls_routes_each_call(
    provider, fake_llm, db
):
    conversation = Conversation.objects.create(title="Newsletter", system_prompt="You help.")
    result = compacted_lookup(conversation)
    add_message(conversation, "user", "Is the autumn secret still the one in settings 8?")
    calls = [
        {"id": "call_settings", "name": "get_settings", "arguments": {"id": 8}},
        {"id": "call_recall", "name": "recall", "arguments": {"handle": f"m{result.pk}"}},
    ]
    fake_llm.script(
        "anthropic.messages" if provider == "anthropic" else "gemini.generate",
        ok(tool_calls=calls),
        ok(text="Yes: ORCHID-7731-QX."),
    )
    host_calls = []

    def run_tool(name, arguments):
        host_calls.append((name, arguments))
        return "<settings id=8>secret: ORCHID-7731-QX</settings>"

    call_model = sdk_call(provider, fake_llm)
    step = chat_step(conversation, call_model, provider=provider, tools=HOST_TOOLS, recall=True)
    stored = answer_tool_calls(conversation, step.tool_calls, run_tool)
    # The fake server refuses a result without its call, or a call without its result.
    last = chat_step(conversation, call_model, provider=provider, tools=HOST_TOOLS, recall=True)

    assert Conversation.objects.get(pk=conversation.pk).recall_count == 1
    assert host_calls == [("get_settings", {"id": 8})]
    assert [(m.tool_name, m.tool_call_id) for m in stored] == [
        ("get_settings", "call_settings"),
        ("recall", "call_recall"),
    ]
    assert stored[1].content == run_tool_call(conversation, "recall", {"handle": f"m{result.pk}"})
    assert SECRET_ROW in stored[1].content
    assert last.text == "Yes: ORCHID-7731-QX."
    first = fake_llm.requests[0].body
    if provider == "anthropic":
        names = [t["name"] for t in first["tools"]]
    else:
        names = [d["name"] for d in first["tools"][0]["functionDeclarations"]]
    assert names == ["get_settings", "recall", "search_history"]


def test_a_host_tool_named_like_a_recall_tool_is_refused_before_any_call(db):
    conversation = Conversation.objects.create(title="Clash")
    add_message(conversation, "user", "Hello")
    tools = [{"name": "recall", "description": "The host's own.", "parameters": None}]

    with pytest.raises(ValidationError) as raised:
        chat_step(conversation, lambda request: pytest.fail("called"), tools=tools, recall=True)

    assert raised.value.code == "tool_name_taken"
    assert conversation.messages.count() == 1


def test_search_history_finds_a_value_from_a_result_compacted_100_steps_earlier(db):
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    add_message(conversation, "user", "Audit every newsletter setting.")
    page = html(3000) + SECRET_ROW + html(3000)
    first = None
    for step in range(101):
        call = {"id": f"c{step}", "name": "get_settings", "arguments": {"id": step}}
        add_message(conversation, "assistant", "", tool_calls=[call])
        result = add_message(
            conversation,
            "tool",
            page if step == 0 else f"setting {step}: ok",
            tool_call_id=call["id"],
        )
        first = first or result
    add_message(conversation, "assistant", "All audited.")
    compact_tool_results(conversation)
    first.refresh_from_db()
    assert first.compaction == "truncated"

    # Words out of order and in other cases: full-text search, not a substring.
    found = run_tool_call(
        conversation, "search_history", {"query": "Newsletter webhook orchid-7731-qx"}
    )

    lines = found.splitlines()
    assert lines[0] == '1 match for "Newsletter webhook orchid-7731-qx" (best first):'
    assert lines[1].startswith(f"- ref m{first.pk} (tool get_settings): ")
    assert "«webhook» secret for the autumn «newsletter» is «ORCHID»«-7731»-«QX»." in lines[1]
    assert lines[2] == "Recall a ref to read its original."
    assert "ORCHID-7731-QX" in run_tool_call(conversation, "recall", {"handle": f"ref m{first.pk}"})
    assert Conversation.objects.get(pk=conversation.pk).recall_count == 2


def test_a_2_mb_result_is_indexed_and_found_past_the_indexed_prefix(db):
    conversation = Conversation.objects.create(title="Dump")
    # 2 MB of distinct tokens: its whole text would pass tsvector's 1 MB limit.
    dump = " ".join(f"k{n:07x}" for n in range(230_000)) + " TAIL-VALUE-991"
    assert len(dump) > 2_000_000
    turn = tool_turn(conversation, "Dump the keys", [("dump_keys", {}, dump)])

    head = run_tool_call(conversation, "search_history", {"query": "k0000abc"})
    tail = run_tool_call(conversation, "search_history", {"query": "TAIL-VALUE-991"})

    assert head.splitlines()[1].startswith(f"- ref m{turn[2].pk} (tool dump_keys): ")
    assert "k0000abc" in head
    assert tail.splitlines()[1].startswith(f"- ref m{turn[2].pk} (tool dump_keys): ")
    assert "TAIL-VALUE-991" in tail.splitlines()[1]


def test_a_handle_of_another_conversation_is_refused_and_reveals_nothing(db):
    mine = Conversation.objects.create(title="Mine")
    theirs = Conversation.objects.create(title="Theirs")
    tool_turn(mine, "hello", [("get_settings", {"id": 1}, "nothing here")])
    secret = tool_turn(theirs, "secret", [("get_settings", {"id": 2}, SECRET_ROW)])[2]

    refused = run_tool_call(mine, "recall", {"handle": f"m{secret.pk}"})
    missing = run_tool_call(mine, "recall", {"handle": "m999999999"})
    searched = run_tool_call(mine, "search_history", {"query": "ORCHID-7731-QX"})

    assert refused == f"Error: no stored original named m{secret.pk} in this conversation."
    assert missing == "Error: no stored original named m999999999 in this conversation."
    assert searched == (
        'No stored original matches "ORCHID-7731-QX".\n'
        "(Searched by words only: no embedding model is configured.)"
    )
    assert Conversation.objects.get(pk=mine.pk).recall_count == 1  # the empty search only


def test_search_history_ranks_all_of_a_rare_words_matches_and_the_newest_of_a_common_ones(
    db, monkeypatch
):
    monkeypatch.setattr(recall, "RANKED_MATCHES", 4)
    conversation = Conversation.objects.create(title="Agent")
    # The oldest message says the word most often: the best match of all.
    best = add_message(conversation, "user", "orchid orchid orchid orchid, and lilac lilac")
    plain = [add_message(conversation, "user", f"Note {n}: orchid.") for n in range(5)]
    add_message(conversation, "user", "lilac")

    def found(query: str) -> list[str]:
        text = run_tool_call(conversation, "search_history", {"query": query})
        return re.findall(r"^- ref (m\d+)", text, re.M)

    # Two matches, within the bound: all ranked, the best first wherever it is.
    assert found("lilac")[0] == f"m{best.pk}"
    # Six matches: the newest four ranked (the substring search adds the others after).
    assert found("orchid")[:4] == [f"m{message.pk}" for message in reversed(plain[1:])]
    assert found("orchid")[4:] == [f"m{plain[0].pk}", f"m{best.pk}"]


def test_a_fork_searches_its_parent_up_to_the_fork_point(db):
    parent = Conversation.objects.create(title="Parent")
    before = tool_turn(parent, "first", [("get_settings", {"id": 1}, "alpha PLUM-11 row")])
    branch_at = add_message(parent, "user", "try again with PLUM-22")
    add_message(parent, "assistant", "ok")
    after = tool_turn(parent, "later", [("get_settings", {"id": 3}, "gamma PLUM-33 row")])
    fork, _ = fork_from_message(parent, branch_at.pk, summarize=False)

    found = run_tool_call(fork, "search_history", {"query": "PLUM"})

    assert f"ref m{before[2].pk} " in found
    assert f"ref m{branch_at.pk} " in found
    assert f"ref m{after[2].pk} " not in found
    assert run_tool_call(fork, "recall", {"handle": f"m{after[2].pk}"}).startswith("Error:")


def test_bad_calls_get_an_error_text_not_an_exception(db):
    conversation = Conversation.objects.create(title="t")
    result = tool_turn(conversation, "q", [("get_settings", {}, "x" * 20_000)])[2]

    assert run_tool_call(conversation, "delete_everything", {}) == (
        "Error: unknown tool 'delete_everything'; the recall tools are recall and search_history."
    )
    assert run_tool_call(conversation, "recall", {}) == (
        'Error: recall needs a "handle" as the text names it, e.g. "m4182".'
    )
    assert run_tool_call(conversation, "recall", "not json") == (
        "Error: the arguments must be a JSON object."
    )
    assert run_tool_call(conversation, "recall", {"handle": f"m{result.pk}", "offset": -1}) == (
        "Error: offset must be a whole number from 0 to 2147483646."
    )
    assert run_tool_call(conversation, "search_history", {"query": " "}) == (
        'Error: search_history needs a "query": the words or value to look for.'
    )
    assert Conversation.objects.get(pk=conversation.pk).recall_count == 0


@override_settings(ASSISTANT_COMPACTION={"RECALL_MAX_CHARS": 3000})
def test_a_long_original_is_read_a_page_at_a_time(db):
    conversation = Conversation.objects.create(title="t")
    text = "".join(f"line {n:05d}\n" for n in range(2000))  # 22,000 characters
    result = tool_turn(conversation, "q", [("read_log", {"path": "app.log"}, text)])[2]

    page = run_tool_call(conversation, "recall", {"handle": f"m{result.pk}", "offset": 11_000})

    lines = page.splitlines()
    assert lines[0] == (
        f'[ref m{result.pk} · tool result of read_log {{"path": "app.log"}} · 22,000 characters '
        "· showing 11,000-14,000]"
    )
    assert lines[1] == "line 01000"
    # A page is RECALL_MAX_CHARS characters of the original; its frame comes on top.
    assert page.split("\n", 1)[1].rsplit("\n", 1)[0] == text[11_000:14_000]
    assert lines[-1] == f"[8,000 more characters: recall m{result.pk} with offset 14000]"
    assert len(page) <= recall_result_cap(3000)


def test_pages_read_at_offsets_of_recall_max_chars_skip_nothing(db):
    # A model computing the next offset from the setting (8,000)
    # reads the whole original, the first page's calls and frame aside.
    conversation = Conversation.objects.create(title="t")
    text = "".join(f"row {n:06d} of the export\n" for n in range(1500))  # 37,500 characters
    result = tool_turn(conversation, "q", [("export", {"table": "orders"}, text)])[2]
    step = compaction_config().RECALL_MAX_CHARS
    assert step == 8000

    pages = []
    for offset in range(0, len(text), step):
        reply = run_tool_call(conversation, "recall", {"handle": f"m{result.pk}", "offset": offset})
        header, page = reply.split("\n", 1)
        assert header.endswith(f"showing {offset:,}-{min(offset + step, len(text)):,}]")
        if offset + step < len(text):
            footer = (
                f"\n[{len(text) - offset - step:,} more characters: recall m{result.pk} "
                f"with offset {offset + step}]"
            )
            assert page.endswith(footer)
            page = page.removesuffix(footer)
        pages.append(page)

    assert "".join(pages) == text


INDEX_WINDOW = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "MAX_MESSAGES_BEFORE_SUMMARY": 10,
    "MIN_RECENT_MESSAGES": 4,
    "COMPACTION_TIMING": "eager",
}


def test_the_index_survives_three_window_shifts_with_a_summarizer_that_drops_everything(
    fake_llm, settings, db
):
    # Through the `settings` fixture only: an @override_settings decorator here would be
    # undone before the fixture's overrides, whose teardown then restores INDEX_WINDOW.
    settings.ASSISTANT_COMPACTION = INDEX_WINDOW
    fake_llm.use_anthropic(settings)  # every summary: the fake's, which keeps nothing
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    code = "defmodule Spotter.Services.ReviewTokenStore do\n  def load_session_messages(id) do\n"
    turns = [
        [("Read", {"file_path": "/srv/app/lib/review_store.ex"}, code + "x" * 400)],
        [("Edit", {"file_path": "/srv/app/lib/review_store.ex", "old_string": "a"}, "ok " * 90)],
        [("fetch", {"url": "https://docs.example.com/hooks"}, "Hooks page " * 40)],
        [("get_reservation_details", {"reservation_id": "JG7FMM"}, "reservation " * 40)],
        [("Bash", {"command": "cat config/dev.exs | head"}, "config :spotter " * 30)],
    ]
    results = []
    for number, calls in enumerate(turns * 2):
        results.append(tool_turn(conversation, f"step {number}", calls)[2])
        if number in (3, 6, 9):
            ensure_context_summary(conversation)

    conversation.refresh_from_db()
    assert conversation.compaction_events.filter(kind="window_summary").count() == 3
    summary = conversation.compaction_summary
    assert "ReviewTokenStore" not in without_index(summary)  # the summarizer dropped it
    index = summary.split("\n\n## Originals:", 1)[1]
    first = conversation.messages.order_by("id")[0].pk
    through = conversation.compaction_through_message_id
    # Eight turns summarized: the latest read, edit and fetch are the second round's,
    # the record and the command the first round's, indexed two shifts before. The file
    # read then edited keeps both handles: the text read, and the change.
    assert through == results[7].pk + 1
    record, bash, read, edit, fetch = (r.pk for r in results[3:8])
    assert index == (
        f" ref m{first}..m{through}\n"
        f"Files modified: /srv/app/lib/review_store.ex (read ref m{read}, changed ref m{edit})\n"
        f"Files read: config/dev.exs (ref m{bash})\n"
        f"URLs: https://docs.example.com/hooks (ref m{fetch})\n"
        f"Records: reservation_id JG7FMM (ref m{record})\n"
        f"Results: ref m{read}: Spotter.Services.ReviewTokenStore, load_session_messages"
    )


def test_definitions_are_found_in_source_code_of_several_languages():
    source = "\n".join(
        [
            "     1→defmodule Spotter.Services.Tmux do",
            "     2→  defp pane_table(rows), do: rows",
            "lib/x.py:12:    async def load_session_messages(self, id):",
            "export class ReviewPanel extends Base {",
            "func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {",
            "static int match_pattern_type(ast_t* ast)",
            "  fun ref parse_args(argv: Array[String]): Command =>",
            "The class of service is economy, not a definition.",
            "if (x) {",
        ]
    )

    assert definitions(source) == [
        "Spotter.Services.Tmux",
        "pane_table",
        "load_session_messages",
        "ReviewPanel",
        "ServeHTTP",
        "match_pattern_type",
        "parse_args",
    ]


def test_the_tool_definitions_take_each_providers_shape():
    anthropic_tools = tool_definitions("anthropic")
    gemini_tools = tool_definitions("gemini")

    assert [t["name"] for t in anthropic_tools] == ["recall", "search_history"]
    assert anthropic_tools[0]["input_schema"]["required"] == ["handle"]
    declarations = gemini_tools[0]["function_declarations"]
    assert [d["name"] for d in declarations] == ["recall", "search_history"]
    assert declarations[1]["parameters"]["required"] == ["query"]
    chat = tool_definitions("openai")
    assert [t["function"]["name"] for t in chat] == ["recall", "search_history"]
    assert chat[0]["type"] == "function"
    responses = tool_definitions("openai_responses")
    assert [(t["type"], t["name"]) for t in responses] == [
        ("function", "recall"),
        ("function", "search_history"),
    ]
    with pytest.raises(ValidationError) as refused:
        tool_definitions("mistral")
    assert refused.value.code == "unknown_provider"


def test_the_conversation_page_shows_how_often_the_model_recalled(client, db):
    conversation = Conversation.objects.create(title="Recalled")
    result = tool_turn(conversation, "q", [("get_settings", {"id": 1}, SECRET_ROW)])[2]
    for _ in range(3):
        run_tool_call(conversation, "recall", {"handle": f"m{result.pk}"})
    client.force_login(staff_user())

    response = client.get(reverse("admin:assistant_conversation_change", args=[conversation.pk]))

    assert response.status_code == 200
    assert response.context["original"].recall_count == 3
    assert re.search(
        r'field-recall_count.*?<div class="readonly">3</div>', response.content.decode(), re.S
    )


@pytest.mark.parametrize(
    ("arguments", "reply"),
    [
        (
            {"offset": 2**31 - 1},
            "Error: offset must be a whole number from 0 to 2147483646.",
        ),
        ({"offset": 10**30}, "Error: offset must be a whole number from 0 to 2147483646."),
        ({"offset": -3}, "Error: offset must be a whole number from 0 to 2147483646."),
        ({"offset": "ten"}, "Error: offset must be a whole number from 0 to 2147483646."),
        ({"offset": 2.5}, "Error: offset must be a whole number from 0 to 2147483646."),
        (
            {"limit": 10**30, "offset": 2**31 - 1},
            ("Error: offset must be a whole number from 0 to 2147483646."),
        ),
    ],
)
@pytest.mark.parametrize("target", ["message", "range"])
def test_a_recall_offset_out_of_range_gets_an_error_text(db, arguments, reply, target):
    conversation = Conversation.objects.create(title="t")
    result = tool_turn(conversation, "q", [("get_settings", {}, "x" * 20_000)])[2]
    name = f"m{result.pk}" if target == "message" else f"m1..m{result.pk}"

    assert run_tool_call(conversation, "recall", {"handle": name, **arguments}) == reply
    assert Conversation.objects.get(pk=conversation.pk).recall_count == 0


def test_the_largest_recall_offset_reads_past_the_end(db):
    conversation = Conversation.objects.create(title="t")
    result = tool_turn(conversation, "q", [("get_settings", {}, "x" * 20_000)])[2]

    reply = run_tool_call(conversation, "recall", {"handle": f"m{result.pk}", "offset": 2**31 - 2})

    assert reply.startswith(f"[ref m{result.pk} · tool result of get_settings {{}} · 20,000 ")
    assert reply.endswith("· showing 2,147,483,646-2,147,483,646]")


@pytest.mark.parametrize(
    ("query", "reply"),
    [
        ("a\x00b", "Error: the query contains a NUL character (\\x00); search without it."),
        (
            "lone \ud800 surrogate",
            "Error: the query is not valid Unicode (it contains a lone surrogate).",
        ),
        (
            "x" * 501,
            "Error: the query is 501 characters long; search_history takes at most 500.",
        ),
    ],
)
def test_a_search_query_that_cannot_be_searched_gets_an_error_text(db, query, reply):
    conversation = Conversation.objects.create(title="t")
    tool_turn(conversation, "q", [("get_settings", {}, "x" * 20_000)])

    assert run_tool_call(conversation, "search_history", {"query": query}) == reply
    assert Conversation.objects.get(pk=conversation.pk).recall_count == 0


def test_a_recall_on_a_deleted_conversation_counts_nothing(db):
    conversation = Conversation.objects.create(title="t")
    result = tool_turn(conversation, "q", [("get_settings", {}, "value 42")])[2]
    Conversation.objects.filter(pk=conversation.pk).update(deleted_at=timezone.now())

    reply = run_tool_call(conversation, "recall", {"handle": f"m{result.pk}"})

    assert "value 42" in reply
    assert Conversation.objects.get(pk=conversation.pk).recall_count == 0
