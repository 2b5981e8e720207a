"""`python -m bench --recall-quality`: what semantic recall adds to search_history on
the real sessions (docs/benchmarks.rst, "Recall quality"), with the local
all-MiniLM-L6-v2 model (the `local-embeddings` extra, requirements/bench.txt).

Each real session past the trigger is stored through add_message and its consumed tool
results compacted, as the post-exchange task does; the worker's embedding job
(assistant.recall.embed_pending) then embeds the compacted originals with the local
model. Each retention probe is a search the model could make when it needs the
identifier: the call that used it, in the session (its text, tool name and
arguments), with the identifier itself taken out, as a question in other words than
the original's. A probe is found when the search's result names the handle of the
tool result the identifier was planted in. Printed: per session and in all, the
probes full-text search alone misses and how many of those the combined search
finds, and the probes full-text finds that the combined search loses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.sessions import REAL, Session, load_sessions

#: The queries search_history takes (assistant.recall.MAX_QUERY_CHARS).
QUERY_CHARS = 500


@dataclass
class Tally:
    name: str
    probes: int = 0
    words_missed: int = 0
    found_by_both: int = 0  # of those full-text missed
    lost_by_both: int = 0  # full-text found, the combined search did not


def query_for(session: Session, ask: dict[str, Any]) -> str:
    """The call that needed the probe, its identifier taken out."""
    message = session.messages[ask["message_index"]]
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or ():
        parts.append(f"{call['name']} {json.dumps(call.get('arguments') or {})}")
    text = " ".join(" ".join(parts).replace(ask["needle"], " ").split())
    if not text:
        turn_start = next(
            m for m in reversed(session.messages[: ask["message_index"]]) if m["role"] == "user"
        )
        text = " ".join(turn_start["content"].replace(ask["needle"], " ").split())
    return text[:QUERY_CHARS]


def _asks(session: Session) -> list[dict[str, Any]]:
    needles = json.loads((REAL / f"{session.name}.needles.json").read_text())
    asks, seen = [], set()
    for ask in [*needles.get("step_asks", []), *needles.get("asks", [])]:
        key = (ask["message_index"], ask["needle"])
        if key not in seen and ask.get("planted_message_index") is not None:
            seen.add(key)
            asks.append(ask)
    return asks


def run(step: Callable[[str], None]) -> list[str]:
    from django.test.utils import override_settings

    from assistant.models import Conversation
    from assistant.providers import embedder
    from assistant.recall import embed_pending, run_tool_call, vectors_available
    from assistant.services import add_message, compact_tool_results
    from assistant.settings.conf import compaction_config
    from assistant.text import estimate_tokens
    from bench.fake_summarizer import FakeSummarizer
    from bench.measures import prepare_database, use_fake

    step("preparing the benchmark database")
    prepare_database()
    if not vectors_available():
        return ["recall quality: this database has no pgvector (make pgvector)"]
    trigger = compaction_config().CONTEXT_TOKEN_THRESHOLD
    # The long sessions: the whole of each past the trigger, as sending everything's
    # last request would be (7 of the shared ones; the sub-agent one is judged by its
    # largest request in make bench, not here).
    sessions = [
        s
        for s in load_sessions()
        if sum(estimate_tokens(m["content"]) for m in s.messages) > trigger
    ]
    tallies = []
    with use_fake(FakeSummarizer()), override_settings(ASSISTANT_EMBEDDINGS="local"):
        if embedder() is None:
            return ["recall quality: the local-embeddings extra is not installed"]
        stored: dict[str, list[int]] = {}
        for session in sessions:
            step(f"{session.name}: {len(session.messages)} messages through add_message")
            conversation = Conversation.objects.create(title=session.name)
            ids = []
            for message in session.messages:
                fields = {
                    key: message[key] for key in ("tool_calls", "tool_call_id") if key in message
                }
                ids.append(
                    add_message(conversation, message["role"], message["content"], **fields).pk
                )
            compact_tool_results(conversation)  # every result is consumed by the end
            stored[session.name] = [conversation.pk, *ids]
        step("the embedding job, with the local model")
        embedded = 0
        while (run_ := embed_pending()).embedded:
            embedded += run_.embedded
        step(f"{embedded:,} texts embedded; each probe searched by words, then by both")
        for session in sessions:
            conversation_id, *ids = stored[session.name]
            conversation = Conversation.objects.get(pk=conversation_id)
            tally = Tally(session.name)
            for ask in _asks(session):
                query = query_for(session, ask)
                wanted = re.compile(rf"- ref m{ids[ask['planted_message_index']]} \(")
                with override_settings(ASSISTANT_EMBEDDINGS="off"):
                    by_words = bool(
                        wanted.search(
                            run_tool_call(conversation, "search_history", {"query": query})
                        )
                    )
                by_both = bool(
                    wanted.search(run_tool_call(conversation, "search_history", {"query": query}))
                )
                tally.probes += 1
                tally.words_missed += not by_words
                tally.found_by_both += (not by_words) and by_both
                tally.lost_by_both += by_words and not by_both
            tallies.append(tally)
    total = Tally(
        f"all {len(tallies)} long sessions",
        *(
            sum(getattr(t, key) for t in tallies)
            for key in ("probes", "words_missed", "found_by_both", "lost_by_both")
        ),
    )
    rows = [
        "| session | probes | full text misses | of those, found by full text + semantic "
        "| full text finds, combined loses |",
        "|---|---|---|---|---|",
    ]
    for tally in [*tallies, total]:
        rows.append(
            f"| {tally.name} | {tally.probes} | {tally.words_missed} | {tally.found_by_both} "
            f"| {tally.lost_by_both} |"
        )
    return rows
