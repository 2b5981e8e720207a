"""`python -m bench --scale`: the app at production size (docs/benchmarks.rst, "At
scale"). It builds the large database itself: the bulk through SQL (bench/bulk.py,
`--scale-bulk` messages over `--scale-conversations` conversations), one long
conversation through the app's write path (`add_message`, `--scale-messages`), and
small baselines the same way; then prints each figure as a ratio against its
baseline, measured in the same run: search_history per query shape (235 messages
against the long one), the admin list (time and queries: a page of small
conversations in an empty database against the full one), prepare_context at 100
messages against a third of the long one and the whole of it, and the post-exchange
work at 235 against the long one. Not part of `make bench` nor `make test`.

`--scale-search` measures search_history alone, in a minute: the long conversation
written through SQL (bench/bulk.py: the same shares of the common word and of the two
words, a rare token per message), in no bulk. `--scale-post-exchange` measures the
post-exchange work alone the same way, the long conversation's window shifted first.
`--scale-semantic` measures search_history with semantic recall among 10 and 10,000
stored embeddings."""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

#: The production sizes the figures are for: a conversation of 30,000 messages in a database of
#: 1,000,000 more, over 5,000 conversations.
LONG_MESSAGES, BULK_MESSAGES, BULK_CONVERSATIONS = 30_000, 1_000_000, 5_000
#: The baselines: a conversation of this many messages for search and post-exchange,
#: and of this many for prepare_context.
SMALL_MESSAGES, PRECALL_BASELINE = 235, 100
#: Each bulk message's length, in filler sentences (about 1 KB in all).
FILLER = 16
REPEATS = 5
CHANGELIST = "/admin/assistant/conversation/"
#: The admin list's page: its baseline is a page of small conversations.
PAGE = 50


@dataclass(frozen=True)
class Figure:
    name: str
    baseline: float  # ms
    measured: float  # ms
    extra: str = ""

    def line(self) -> str:
        ratio = self.measured / self.baseline if self.baseline > 0 else float("inf")
        return (
            f"{self.name:<44} {self.baseline:9.2f} ms  {self.measured:9.2f} ms  "
            f"{ratio:6.2f}x{'  ' + self.extra if self.extra else ''}"
        )


def median_ms(work: Callable[[], Any], repeats: int = REPEATS) -> float:
    work()  # warm: caches, the first plan
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def token(n: int) -> str:
    """The rare token of the long conversation's n-th turn (nowhere else)."""
    return hashlib.md5(f"scale-{n}".encode()).hexdigest()


def grow(conversation: Any, messages: int, start: int = 0) -> int:
    """Turns through add_message until the conversation holds `messages` more: a user
    message, an assistant call of read_file, its result (about 1 KB), an answer.
    Returns the next turn's number."""
    from assistant.services import add_message

    turn = start
    added = 0
    while added < messages:
        path = f"src/f{turn % 50}.py"
        add_message(conversation, "user", f"Step {turn}: check {path}, token {token(turn)}.")
        call = {"id": f"t{turn}", "name": "read_file", "arguments": {"path": path}}
        add_message(
            conversation,
            "assistant",
            "",
            tool_calls=[call],
            input_tokens=2000,
            output_tokens=40,
            model="claude-sonnet-4-6",
        )
        word = "database" if turn % 3 == 0 else "cache"
        campaign = "The newsletter campaign went out. " if turn % 7 == 0 else ""
        body = f"# {path}\nThe {word} layer, line {turn}. {campaign}" + "x = 1  # setting\n" * 50
        add_message(conversation, "tool", body, tool_call_id=f"t{turn}")
        add_message(
            conversation, "assistant", f"Checked {path}.", input_tokens=2100, output_tokens=20
        )
        added += 4
        turn += 1
    return turn


def search_figures(small: Any, long: Any, long_token: str, long_messages: int) -> list[Figure]:
    """search_history's median per query shape, in the small conversation and the long."""
    from assistant.services import run_tool_call

    shapes = {
        "rare token": (token(5), long_token),
        "common word": ("database", "database"),
        "two words": ("newsletter campaign", "newsletter campaign"),
        "no match": ("zanzibar quokka", "zanzibar quokka"),
    }
    figures = []
    for shape, (small_query, long_query) in shapes.items():
        measured_small = median_ms(
            partial(run_tool_call, small, "search_history", {"query": small_query})
        )
        measured_long = median_ms(
            partial(run_tool_call, long, "search_history", {"query": long_query})
        )
        figures.append(
            Figure(
                f"search_history {shape}, {SMALL_MESSAGES} vs {long_messages:,}",
                measured_small,
                measured_long,
            )
        )
    return figures


def run_search(long_messages: int, step: Callable[[str], None]) -> list[str]:
    """`--scale-search`: the search figures alone, the long conversation through SQL."""
    from assistant.models import Conversation
    from bench.bulk import analyze, insert_messages, rare_token
    from bench.fake_summarizer import FakeSummarizer
    from bench.measures import prepare_database, use_fake

    step("preparing the benchmark database")
    prepare_database()
    with use_fake(FakeSummarizer()):
        step(f"the baseline through add_message: {SMALL_MESSAGES} messages")
        small = Conversation.objects.create(title="small", system_prompt="You help.")
        grow(small, SMALL_MESSAGES)
        step(f"the long conversation through SQL: {long_messages:,} messages")
        long = Conversation.objects.create(title="long", system_prompt="You help.")
        insert_messages(long.pk, long_messages, salt="long", filler=FILLER)
        analyze()
        step("search_history per query shape")
        figures = search_figures(small, long, rare_token("long", long_messages // 2), long_messages)
    header = f"{'figure':<44} {'baseline':>12}  {'measured':>12}  ratio"
    return [header, *(figure.line() for figure in figures)]


#: The stored embeddings semantic search is measured among: its baseline, and the size
#: issue 53 names.
SEMANTIC_FEW, SEMANTIC_MANY = 10, 10_000


def run_semantic(step: Callable[[str], None]) -> list[str]:
    """`--scale-semantic`: search_history with semantic recall among SEMANTIC_FEW and
    SEMANTIC_MANY stored embeddings (OpenAI's default model and dimensions, 1,536, the
    query embedded through the real SDK by the testing kit's fake server, a local
    round trip), all of them the searched conversation's: its whole share is read
    whatever index the planner takes. Statements counted as well as timed."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext, override_settings

    from assistant.models import Conversation, Embedding
    from assistant.providers import embedder
    from assistant.recall import ensure_index, store_embedding, vectors_available
    from assistant.services import add_message, run_tool_call
    from assistant.testing.fake_provider import FakeProvider
    from bench.measures import prepare_database

    step("preparing the benchmark database")
    prepare_database()
    if not vectors_available():
        return ["semantic search: this database has no pgvector (make pgvector)"]
    fake = FakeProvider().start()
    try:
        with override_settings(
            ASSISTANT_EMBEDDINGS="openai",
            OPENAI_API_KEY="bench-key",
            OPENAI_BASE_URL=fake.openai_url,
        ):
            model = embedder()
            assert model is not None
            ensure_index(model.dimensions)
            conversation = Conversation.objects.create(title="semantic", system_prompt="You help.")
            answer = add_message(conversation, "user", "The chargeback policy: 14 days.")
            vector = model.embed([answer.content], kind="document").vectors[0]
            store_embedding(conversation, Embedding.Source.ORIGINAL, answer.pk, model.model, vector)

            def stored(count: int, first: int) -> None:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "INSERT INTO assistant_embedding (conversation_id, source, source_id, "
                        "chunk, model, dimensions, vector, created_at) "
                        "SELECT %s, 'original', %s + n, 0, %s, %s, "
                        "(SELECT array_agg(random() * 2 - 1)::vector "
                        "FROM generate_series(1, %s) WHERE n > 0), now() "
                        "FROM generate_series(1, %s) AS n",
                        [
                            conversation.pk,
                            first,
                            model.model,
                            model.dimensions,
                            model.dimensions,
                            count,
                        ],
                    )
                    cursor.execute("ANALYZE assistant_embedding")

            def measured() -> tuple[float, int]:
                search = partial(
                    run_tool_call, conversation, "search_history", {"query": "refund rules"}
                )
                milliseconds = median_ms(search)
                with CaptureQueriesContext(connection) as queries:
                    search()
                return milliseconds, len(queries.captured_queries)

            step(f"{SEMANTIC_FEW} stored embeddings")
            stored(SEMANTIC_FEW - 1, 10**12)
            few_ms, few_queries = measured()
            step(f"{SEMANTIC_MANY:,} stored embeddings, through SQL")
            stored(SEMANTIC_MANY - SEMANTIC_FEW, 2 * 10**12)
            many_ms, many_queries = measured()
    finally:
        fake.stop()
    figure = Figure(
        f"search_history semantic, {SEMANTIC_FEW} vs {SEMANTIC_MANY:,} embeddings",
        few_ms,
        many_ms,
        f"queries {few_queries} vs {many_queries}",
    )
    header = f"{'figure':<44} {'baseline':>12}  {'measured':>12}  ratio"
    return [header, figure.line()]


def post_exchange_ms(conversation: Any) -> float:
    """The post-exchange work's median after each of REPEATS exchanges reading the
    same file again (a result the duplicate check stubs)."""
    from django.utils import timezone

    from assistant.models import Conversation
    from assistant.services import add_message, process_exchange

    times = []
    for n in range(REPEATS):
        call = {"id": f"post{n}", "name": "read_file", "arguments": {"path": "src/f7.py"}}
        add_message(conversation, "user", "Read it again.")
        add_message(
            conversation,
            "assistant",
            "",
            tool_calls=[call],
            input_tokens=2000,
            output_tokens=10,
        )
        add_message(conversation, "tool", "x = 1\n" * 400, tool_call_id=f"post{n}")
        add_message(
            conversation,
            "assistant",
            "Same as before.",
            input_tokens=2000,
            output_tokens=10,
        )
        Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
        started = time.perf_counter()
        process_exchange(conversation.pk)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def run_post_exchange(long_messages: int, step: Callable[[str], None]) -> list[str]:
    """`--scale-post-exchange`: the post-exchange figure alone, in a few minutes: the
    baseline through add_message, the long conversation through SQL (bench/bulk.py,
    whole turns of read_file calls and results), its window shifted as the chat path
    leaves it; three rounds, each figure printed as it is measured."""
    from assistant.models import Conversation
    from assistant.services import prepare_context
    from bench.bulk import analyze, insert_messages
    from bench.fake_summarizer import FakeSummarizer
    from bench.measures import prepare_database, use_fake

    step("preparing the benchmark database")
    prepare_database()
    lines = [f"{'figure':<44} {'baseline':>12}  {'measured':>12}  ratio"]
    with use_fake(FakeSummarizer()):
        step(f"the baseline through add_message: {SMALL_MESSAGES} messages")
        small = Conversation.objects.create(title="small", system_prompt="You help.")
        grow(small, SMALL_MESSAGES)
        step(f"the long conversation through SQL: {long_messages:,} messages")
        long = Conversation.objects.create(title="long", system_prompt="You help.")
        # Whole turns (user, call, result): the last message is a result.
        insert_messages(long.pk, long_messages - long_messages % 3, salt="long")
        analyze()
        prepare_context(small)
        prepare_context(long)  # its first call shifts the window
        for round_ in range(3):
            figure = Figure(
                f"post-exchange {SMALL_MESSAGES} vs {long_messages:,}, round {round_ + 1}",
                post_exchange_ms(small),
                post_exchange_ms(long),
            )
            step(figure.line())
            lines.append(figure.line())
    return lines


def run(
    long_messages: int, bulk_messages: int, conversations: int, step: Callable[[str], None]
) -> list[str]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from assistant.models import Conversation
    from assistant.services import prepare_context
    from bench.bulk import analyze, insert_messages
    from bench.fake_summarizer import FakeSummarizer
    from bench.measures import prepare_database, use_fake

    step("preparing the benchmark database")
    prepare_database()
    figures: list[Figure] = []

    def keep(*measured: Figure) -> None:
        # Each figure printed as it is measured: a run cut short keeps what it measured.
        figures.extend(measured)
        for figure in measured:
            step(figure.line())

    users = get_user_model().objects
    staff = users.filter(username="scale").first() or users.create_superuser("scale", "", "x")
    client = Client(HTTP_HOST="localhost")
    client.force_login(staff)

    def admin_list() -> tuple[float, int]:
        # median_ms's first, unmeasured read computes the figures a page lacks (the
        # post-exchange task's job in production).
        seconds = median_ms(lambda: client.get(CHANGELIST))
        with CaptureQueriesContext(connection) as queries:
            response = client.get(CHANGELIST)
        assert response.status_code == 200, response.status_code
        return seconds, len(queries.captured_queries)

    with use_fake(FakeSummarizer()):
        step(f"baselines through add_message: {PRECALL_BASELINE} and {SMALL_MESSAGES} messages")
        precall_small = Conversation.objects.create(
            title="precall baseline", system_prompt="You help."
        )
        grow(precall_small, PRECALL_BASELINE)
        small = Conversation.objects.create(title="small", system_prompt="You help.")
        grow(small, SMALL_MESSAGES)
        # A page of conversations as the list shows it, each of a few messages.
        for number in range(PAGE):
            insert_messages(Conversation.objects.create(title=f"page {number}").pk, 4)
        empty_ms, empty_queries = admin_list()

        step(
            f"the bulk through SQL: {bulk_messages:,} messages over {conversations:,} conversations"
        )
        per = max(bulk_messages // conversations, 1)
        for number in range(conversations):
            insert_messages(
                Conversation.objects.create(title=f"bulk {number}").pk,
                per,
                salt=f"b{number}",
                filler=FILLER,
            )
        analyze()

        step(f"the long conversation through add_message: {long_messages:,} messages")
        long = Conversation.objects.create(title="long", system_prompt="You help.")
        checkpoints = {}
        turn = grow(long, long_messages // 3)
        analyze()
        prepare_context(long)  # its first call may shift the window
        checkpoints[long_messages // 3] = median_ms(lambda: prepare_context(long))
        turn = grow(long, long_messages - long_messages // 3, start=turn)
        analyze()
        prepare_context(long)
        checkpoints[long_messages] = median_ms(lambda: prepare_context(long))
        prepare_context(precall_small)
        baseline = median_ms(lambda: prepare_context(precall_small))
        for size, measured in checkpoints.items():
            keep(Figure(f"prepare_context {PRECALL_BASELINE} vs {size:,}", baseline, measured))

        step("search_history per query shape")
        keep(*search_figures(small, long, token(turn // 2), long_messages))

        step("the admin list")
        full_ms, full_queries = admin_list()
        keep(
            Figure(
                "admin list, empty vs full database",
                empty_ms,
                full_ms,
                f"queries {empty_queries} vs {full_queries}",
            )
        )

        step("post-exchange: the same tool results at each size")

        keep(
            Figure(
                f"post-exchange {SMALL_MESSAGES} vs {long_messages:,}",
                post_exchange_ms(small),
                post_exchange_ms(long),
            )
        )
    header = f"{'figure':<44} {'baseline':>12}  {'measured':>12}  ratio"
    return [header, *(figure.line() for figure in figures)]
