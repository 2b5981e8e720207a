"""The artifact index names every summarized result by its handle, with the names found in
it: what a summary leaves out stays one recall away, whatever kind of value it is."""

from __future__ import annotations

from assistant.models import Conversation
from assistant.recall import run_tool_call
from assistant.recall.artifact_index import HEADING, render, without_index
from assistant.services import add_message, ensure_context_summary
from assistant.text.names import names_in
from assistant.text.tokens import estimate_tokens
from tests.builders import tool_turn

WINDOW = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "MAX_MESSAGES_BEFORE_SUMMARY": 10,
    "MIN_RECENT_MESSAGES": 4,
    "COMPACTION_TIMING": "eager",
}


def summarize_after_three_turns(conversation: Conversation) -> None:
    """Three small turns after what a test built, then the pre-call hook, which
    summarizes what came before them."""
    for number in range(3):
        tool_turn(conversation, f"step {number}", [("Bash", {"command": "true"}, "ok")])
    ensure_context_summary(conversation)


def index_of(conversation: Conversation) -> str:
    conversation.refresh_from_db()
    summary = conversation.compaction_summary
    assert summary is not None and HEADING in summary
    return summary.split(HEADING, 1)[1]


def test_names_of_each_kind_are_found_in_any_language():
    grep = (
        "cli/hooks_gemini.go-574-func handleGeminiBeforeAgent() error {\n"
        "cli/agent/gemini.go:159:// converts an id"
    )
    yaml = "endpoints:\n  - name: chat\n    endpoint_type: llm/v1/chat\n    api_base: $BASE\n"
    elixir = '  @review_heartbeat_interval 10_000\n  def mount(%{"session_id" => id}, socket) do'
    prose = "- Add a catch-all handler for a malformed `terminal_scrolled` payload."
    code = (
        "children = [\n  Spotter.Services.ReviewTokenStore,\n]\n"
        "const entries = this.sessionManager.loadEntries();\n"
        'Phoenix.PubSub.subscribe(Spotter.PubSub, "pane_sessions")'
    )
    listing = "create mode 100644 packages/agent/test/hooks.test.ts\nnpm notice 2.2kB dist/index.js"

    assert names_in(grep, 10) == [
        "handleGeminiBeforeAgent",
        "cli/hooks_gemini.go",
        "cli/agent/gemini.go",
    ]
    assert names_in(yaml, 10) == ["endpoint_type", "api_base"]
    assert names_in(elixir, 10) == ["mount", "review_heartbeat_interval", "session_id"]
    assert names_in(prose, 10) == ["terminal_scrolled"]
    assert names_in(code, 10) == [
        "pane_sessions",
        "Spotter.Services.ReviewTokenStore",
        "Phoenix.PubSub.subscribe",
        "Spotter.PubSub",
        "this.sessionManager.loadEntries",  # an own member by its chain, its tails in it
    ]
    assert names_in(listing, 10) == ["packages/agent/test/hooks.test.ts", "dist/index.js"]
    assert names_in(code, 2) == ["pane_sessions", "Spotter.Services.ReviewTokenStore"]


def test_destructured_names_module_calls_and_variables_are_names():
    react = "    const [selectedFile, setSelectedFile] = useState<File | null>(null);"
    python = "    asyncio.run(_run_pipeline(graph))\n    self.graph.invoke(state)"
    shell = '"command": "${CLAUDE_PLUGIN_ROOT}/scripts/notify.sh $HOME"'

    assert names_in(react, 10) == ["selectedFile", "setSelectedFile"]
    # A module's function by its dotted name; an object's own member by its whole chain.
    assert names_in(python, 10) == ["self.graph.invoke", "_run_pipeline", "asyncio.run"]
    assert "CLAUDE_PLUGIN_ROOT" in names_in(shell, 10)


def test_urls_colours_optional_fields_and_own_member_chains_are_names():
    markdown = (
        "See [the schema](https://schemas.example.org/v2/config.json), or "
        "https://docs.example.net/guide.\nIn HTML, &#123; is an entity."
    )
    css = 'header { color: #1a2b3c; background: "#fff"; border-color: #11223344 }'
    typescript = (
        "interface Options {\n  retryLimit?: number;\n}\n"
        "  render() {\n    this.layout.refresh();\n    return this.renderFooter(x);\n  }"
    )

    assert names_in(markdown, 10) == [
        "https://schemas.example.org/v2/config.json",
        "https://docs.example.net/guide",
    ]
    assert names_in(css, 10) == ["#1a2b3c", "#fff", "#11223344"]
    # The chain says whose member it is; its tails (refresh, renderFooter) are not repeated.
    assert names_in(typescript, 10) == [
        "Options",
        "render",  # a method it defines
        "retryLimit",
        "this.layout.refresh",
        "this.renderFooter",
    ]


def test_the_methods_a_class_defines_come_before_the_names_their_bodies_use():
    typescript = (
        "export class SessionView {\n"
        "  private pendingCount = 0;\n"
        "  private updatePendingDisplay(): void {\n"
        "    const visibleRows = this.rows.filter((row) => row.visible);\n"
        "    this.container.render(visibleRows);\n"
        "  }\n"
        "  async loadTheme(path: string, fallback = defaults()): Promise<Theme> {\n"
        "    if (!path) {\n"
        "      return fallback;\n"
        "    }\n"
        "    items.forEach((item) => {\n"
        "    describe('view', () => {\n"
        "  }\n"
        "  static fromConfig<T>(config: Config<T>) {\n"
        "  get rowCount(): number {\n"
        "}\n"
    )

    names = names_in(typescript, 20)

    # Every method by its name, in order, ahead of the locals and the calls in them.
    assert names[:5] == [
        "SessionView",
        "updatePendingDisplay",
        "loadTheme",
        "fromConfig",
        "rowCount",
    ]
    assert names.index("visibleRows") > 4 and "forEach" not in names[:5]
    assert "describe" not in names[:5] and "if" not in names


def test_prose_words_are_never_names():
    text = "Note: the class of service is economy.\nTotal: 3 items, in stock. Then call us."

    assert names_in(text, 10) == []


def test_every_summarized_result_is_named_by_its_handle_and_recall_returns_its_value(
    fake_llm, settings, db
):
    settings.ASSISTANT_COMPACTION = WINDOW
    fake_llm.use_anthropic(settings)  # every summary: the fake's, which keeps nothing
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    listing = "\n".join(f"/srv/app/config/{name}.exs" for name in ("runtime", "dev", "prod"))
    plan = "Plan:\n- Handle a malformed `terminal_scrolled` payload.\n" + "- step\n" * 40
    gateway = "endpoints:\n  - name: chat\n    endpoint_type: llm/v1/chat\n" + "#\n" * 40
    token = "sk_live_4f9a8b7c6d5e4f3a2b1c0d9e"
    results = [
        tool_turn(conversation, "List configs", [("Glob", {"pattern": "**/*.exs"}, listing)])[2],
        tool_turn(conversation, "Show the plan", [("Bash", {"command": "cat PLAN"}, plan)])[2],
        tool_turn(conversation, "Gateway?", [("Task", {"prompt": "gateway"}, gateway)])[2],
        tool_turn(conversation, "Key?", [("Bash", {"command": "env"}, f'KEY="{token}"')])[2],
    ]
    summarize_after_three_turns(conversation)

    index = index_of(conversation)
    glob, bash, task, env = (r.pk for r in results)
    assert f"ref m{glob} Glob **/*.exs: " in index
    assert f"ref m{bash} Bash cat PLAN: terminal_scrolled" in index
    assert f"ref m{task} Task gateway: endpoint_type" in index
    assert f"ref m{env} Bash env" in index and token not in index  # a generated value
    for pk, value in ((glob, "/srv/app/config/dev.exs"), (bash, "terminal_scrolled")):
        assert value in run_tool_call(conversation, "recall", {"handle": f"m{pk}"})


def named_again_after_newer_results(conversation: Conversation, source: str):
    """A read of `source` (its first name `alpha_widget_store`), five newer reads, a
    summary with no room left for the first; then the model names alpha_widget_store
    again and a later summary is made. (the first read, the newer ones, the index)."""
    first = tool_turn(conversation, "Read it", [("Bash", {"command": "cat a"}, source)])[2]
    later = [
        tool_turn(
            conversation,
            f"Read {n}",
            [("Bash", {"command": f"cat {n}"}, f"def beta_gadget_{n}_loader():")],
        )[2]
        for n in range(5)
    ]
    summarize_after_three_turns(conversation)
    assert f"ref m{first.pk} " not in index_of(conversation)  # the oldest: no room left
    # Named again by the model: in the next summarized slice, it counts as used there.
    add_message(conversation, "user", "Which store?")
    add_message(conversation, "assistant", "alpha_widget_store keeps them.")
    for number in range(6):
        tool_turn(conversation, f"more {number}", [("Bash", {"command": "true"}, "ok")])
    ensure_context_summary(conversation)
    return first, later, index_of(conversation)


def test_a_name_the_model_uses_again_outlives_newer_ones_nobody_used(fake_llm, settings, db):
    settings.ASSISTANT_COMPACTION = {**WINDOW, "ARTIFACT_INDEX_MAX_TOKENS": 50}
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    first, later, index = named_again_after_newer_results(conversation, "def alpha_widget_store():")
    assert f"ref m{first.pk} Bash cat a: alpha_widget_store" in index
    assert f"ref m{later[0].pk} " not in index  # newer, never named again: left out first
    assert f"ref m{later[-1].pk} " in index


def test_an_index_stored_by_the_previous_version_still_renders():
    stored = {
        "first": 1,
        "through": 9,
        "modified": {},
        "read": {"/srv/app/a.py": 3},
        "urls": {},
        "records": {"user_id 7": 5},
        "definitions": {"load_rows": 4},
    }

    assert render(stored, 500) == (
        f"{HEADING} ref m1..m9\n"
        "Files read: /srv/app/a.py (ref m3)\n"
        "Records: user_id 7 (ref m5)\n"
        "Results: ref m4: load_rows"
    )


def test_absolute_paths_are_shown_whole_as_the_model_passes_them_to_its_tools():
    index = {
        "first": 1,
        "through": 9,
        "read": {"/home/dev/project/lib/a.ex": [3, 3], "/home/dev/project/lib/b.ex": [4, 4]},
        "names": {"/tmp/run.log": [5, 5]},
    }

    text = render(index, 500)

    assert text.splitlines()[0] == f"{HEADING} ref m1..m9"
    assert (
        "Files read: /home/dev/project/lib/a.ex (ref m3), /home/dev/project/lib/b.ex (ref m4)"
        in text
    )
    assert "ref m5: /tmp/run.log" in text
    assert without_index(f"Summary.\n\n{text}") == "Summary."


def test_a_file_keeps_the_handle_of_its_whole_read_when_only_a_slice_is_read_later(
    fake_llm, settings, db
):
    settings.ASSISTANT_COMPACTION = WINDOW
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    source = "".join(f"def step_{n}():\n    return run_stage_{n}()\n" for n in range(60))
    whole = tool_turn(conversation, "Read it", [("Read", {"file_path": "lib/app.py"}, source)])[2]
    grep = tool_turn(
        conversation,
        "Where is step_7?",
        [("Bash", {"command": "grep -n step_7 lib/app.py"}, "15:def step_7():")],
    )[2]
    summarize_after_three_turns(conversation)

    index = index_of(conversation)
    # The whole file stays one recall away; the slice is still listed by its own handle.
    assert f"lib/app.py (ref m{whole.pk})" in index
    assert f"ref m{grep.pk}" in index


def test_the_files_read_outlive_newer_names_when_the_budget_is_short():
    names = {f"loader_{n}_widget": [100 + n, 100 + n] for n in range(60)}
    index = {
        "first": 1,
        "through": 200,
        "read": {"/srv/app/lib/old_store.py": [3, 3]},
        "names": names,
    }

    text = render(index, 120)

    assert estimate_tokens(text) <= 120
    assert "/srv/app/lib/old_store.py (ref m3)" in text  # older than every name, kept first
    assert "loader_59_widget" in text  # the rest of the budget: the most recently used
    assert "loader_0_widget" not in text


def test_a_summarized_source_file_shows_its_own_definitions_before_the_calls_it_makes(
    fake_llm, settings, db
):
    settings.ASSISTANT_COMPACTION = WINDOW
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    calls = "".join(f"    Map.put_{n}(x)\n    Enum.map_{n}(y)\n" for n in range(8))
    body = "    # copy the rows one by one, in order\n" * 20
    source = f"def sync_session_file(path) do\n{calls}{body}end\ndef sync_subagents(x) do\nend\n"
    read = tool_turn(conversation, "Read it", [("Bash", {"command": "cat sync"}, source)])[2]
    summarize_after_three_turns(conversation)

    shown = index_of(conversation).split(f"ref m{read.pk} Bash cat sync: ", 1)[1].split(";")[0]
    # The file's own definitions first: the module calls sort before them by name alone.
    assert shown.startswith("sync_session_file, sync_subagents, ")


def test_a_file_named_by_its_relative_and_its_absolute_path_is_listed_once(fake_llm, settings, db):
    settings.ASSISTANT_COMPACTION = WINDOW
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    source = "".join(f"def step_{n}():\n    return {n}\n" for n in range(40))
    tool_turn(
        conversation, "Find it", [("Bash", {"command": "grep -n step lib/app.py"}, "1:def step_0")]
    )
    whole = tool_turn(
        conversation, "Read it", [("Read", {"file_path": "/srv/app/lib/app.py"}, source)]
    )[2]
    status = tool_turn(
        conversation, "Status?", [("Bash", {"command": "git status"}, "modified: lib/app.py")]
    )[2]
    summarize_after_three_turns(conversation)

    index = index_of(conversation)
    assert index.count("lib/app.py") == 1  # no second entry, no name repeating it
    assert f"/srv/app/lib/app.py (ref m{whole.pk})" in index
    assert f"ref m{status.pk} Bash git status" in index


def test_every_name_of_a_result_is_shown_while_the_budget_has_room(fake_llm, settings, db):
    settings.ASSISTANT_COMPACTION = WINDOW
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    source = "".join(f"def load_part_{n}():\n    pass\n" for n in range(10))
    tool_turn(conversation, "Read it", [("Bash", {"command": "cat parts"}, source)])
    summarize_after_three_turns(conversation)

    index = index_of(conversation)
    assert estimate_tokens(index) < 1000  # far within the budget: nothing to leave out
    assert all(f"load_part_{n}" in index for n in range(10))


def test_a_summarized_result_keeps_in_the_index_the_names_its_truncated_form_listed(
    fake_llm, settings, db
):
    settings.ASSISTANT_COMPACTION = {**WINDOW, "TRUNCATION_NAMES_MAX_CHARS": 1200}
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    source = "".join(f"def load_part_{n}():\n    pass\n" for n in range(50))
    tool_turn(conversation, "Read it", [("Bash", {"command": "cat parts"}, source)])
    summarize_after_three_turns(conversation)

    # Fifty definitions, about 700 characters of names: all within the budget, where a
    # fixed two dozen per result would have left most of them out.
    index = index_of(conversation)
    assert all(f"load_part_{n}" in index for n in range(50))


def test_a_name_an_entry_before_it_holds_is_not_shown_again():
    index = {
        "first": 1,
        "through": 9,
        "names": {
            "this.store.flushPending": [5, 5, 0, 0],
            "flushPending": [4, 4, 0, 0],  # an older result: the model reads it above
            "cache_size": [4, 4, 0, 1],
        },
    }

    text = render(index, 500)

    assert "ref m4: cache_size; ref m5: this.store.flushPending" in text
    assert text.count("flushPending") == 1


def test_originals_the_budget_leaves_out_are_still_named_by_their_handle():
    names = {f"loader_{n}_widget_factory": [10 + n, 10 + n, 0, 0] for n in range(40)}
    index = {"first": 1, "through": 60, "names": names}

    text = render(index, 120)

    assert estimate_tokens(text) <= 120
    assert "loader_39_widget_factory" in text  # the newest names, with their handles
    assert "loader_0_widget_factory" not in text
    # Every original the names left out stays one recall away by its handle.
    others = text.split("Other originals: ", 1)[1]
    assert others.startswith("ref m10, ref m11, ")
    shown = [n for n in range(40) if f"loader_{n}_widget_factory" in text]
    assert all(f"ref m{10 + n}" in text for n in range(40))
    assert all(f"ref m{10 + n}," not in others for n in shown)


def test_a_search_within_a_folder_never_takes_the_place_of_another(fake_llm, settings, db):
    settings.ASSISTANT_COMPACTION = WINDOW
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    folder = "/srv/app/lib/billing"
    hits = "".join(f"invoice_{n}.py:3:def total_{n}():\n" for n in range(4))
    first = tool_turn(
        conversation,
        "Where are totals?",
        [("Grep", {"pattern": "def total_", "path": folder}, hits)],
    )[2]
    second = tool_turn(
        conversation,
        "And refunds?",
        [("Grep", {"pattern": "refund", "path": folder}, hits.replace("total", "refund"))],
    )[2]
    summarize_after_three_turns(conversation)

    index = index_of(conversation)
    # Each search keeps its own handle, by what it looked for; the folder is no file read.
    assert f"ref m{first.pk} Grep def total_" in index
    assert f"ref m{second.pk} Grep refund" in index
    assert "Files read" not in index
    for pk, value in ((first.pk, "total_3"), (second.pk, "refund_3")):
        assert value in run_tool_call(conversation, "recall", {"handle": f"m{pk}"})


def test_a_call_whose_result_named_nothing_yields_its_room_to_names_and_keeps_its_handle():
    index = {
        "first": 1,
        "through": 30,
        "calls": {"Bash npm run check 2>&1 | tail -5": [20, 20, 0, 0]},
        "names": {f"handler_{n}_name": [10 + n, 10 + n, 0, 0] for n in range(6)},
    }

    text = render(index, 50)

    assert estimate_tokens(text) <= 50
    # Newer than every name, but it lists nothing the model could use: names go first.
    assert "npm run check" not in text
    assert "handler_5_name" in text and "handler_4_name" in text
    assert "ref m20" in text.split("Other originals: ", 1)[1]
    assert "ref m20 Bash npm run check" in render(index, 500)  # shown while there is room


def test_the_other_names_of_a_result_the_model_uses_again_outlive_newer_ones(
    fake_llm, settings, db
):
    settings.ASSISTANT_COMPACTION = {**WINDOW, "ARTIFACT_INDEX_MAX_TOKENS": 50}
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    source = "def alpha_widget_store():\n    pass\ndef alpha_widget_flush():\n    pass\n"
    first, later, index = named_again_after_newer_results(conversation, source)
    # The model works on again with one name of that file: the file's other names (what
    # it will call next) come back with it, ahead of newer results nobody used.
    assert f"ref m{first.pk} Bash cat a: alpha_widget_store, alpha_widget_flush" in index
    assert f"ref m{later[0].pk} " not in index


def test_a_relative_path_a_result_lists_is_indexed_as_the_absolute_path_known(
    fake_llm, settings, db
):
    settings.ASSISTANT_COMPACTION = WINDOW
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Agent", system_prompt="You help.")
    listing = "/srv/app/cli/session/phase_test.go\n/srv/app/cli/session/state.go\n"
    find = tool_turn(
        conversation, "Which files?", [("Bash", {"command": "find /srv/app -name x"}, listing)]
    )[2]
    grep = tool_turn(
        conversation,
        "Where is it tested?",
        [
            ("Grep", {"pattern": "EventStop", "path": "/srv/app"}, "cli/session/phase_test.go"),
            ("Grep", {"pattern": "Elsewhere", "path": "/srv/app"}, "docs/guide/intro.md"),
        ],
    )[2:4]
    summarize_after_three_turns(conversation)

    index = index_of(conversation)
    # The newest result that named it keeps it, by the path the model passes its tools;
    # a relative path no absolute one ends with stays as it was listed.
    assert f"ref m{grep[0].pk} Grep EventStop: /srv/app/cli/session/phase_test.go" in index
    assert f"ref m{find.pk} Bash find /srv/app -name x: /srv/app/cli/session/state.go" in index
    assert f"ref m{grep[1].pk} Grep Elsewhere: docs/guide/intro.md" in index
