"""The bench on the sessions' own clock (docs/benchmarks.rst "Cache lifetimes"): a real
session replayed with each message stored at its `ts` and each pre-call hook deciding at
the time of its call (bench.chat.SessionClock), each request asking the lifetime the
app chooses (bench.chat.ask_lifetime), as bench/real.py replays ours; and the pricing of
requests at the lifetimes they asked for (bench.payload.asked_cost)."""

from __future__ import annotations

import pytest

from assistant import services
from assistant.models import Conversation, Message
from assistant.providers import LIFETIMES
from assistant.window import decision
from bench.chat import SessionClock, ask_lifetime, finish_turn, store
from bench.payload import CostMeter, Rates, RequestFigures, asked_cost
from bench.sessions import SYSTEM_PROMPT, load_sessions

FIVE, HOUR = LIFETIMES["anthropic"]
ANTHROPIC = Rates(0.1, 1.25)
SESSION = next(s for s in load_sessions() if s.name == "cc-spotter-sub-a7be2f0")


def meter(*requests: RequestFigures) -> CostMeter:
    found = CostMeter()
    found.requests.extend(requests)
    return found


def test_a_request_is_warm_within_the_lifetime_the_one_before_asked_for():
    # 10,000 tokens written, then 10 minutes later the same 10,000 and 100 new.
    first = dict(tokens=10_000, cached_tokens=0, at=0.0)
    second = dict(tokens=10_100, cached_tokens=10_000, at=600.0)
    hour = meter(RequestFigures(**first, lifetime=HOUR), RequestFigures(**second, lifetime=HOUR))
    five = meter(RequestFigures(**first, lifetime=FIVE), RequestFigures(**second, lifetime=FIVE))

    # Read after 10 minutes under the hour; expired under 5 minutes: all written again.
    assert asked_cost(hour, ANTHROPIC) == pytest.approx(2.0 * 10_000 + 0.1 * 10_000 + 2.0 * 100)
    assert asked_cost(five, ANTHROPIC) == pytest.approx(1.25 * 10_000 + 1.25 * 10_100)


@pytest.mark.django_db
def test_a_replay_on_the_sessions_clock_decides_at_each_calls_time(monkeypatch):
    decided_at = []
    decide = decision.decide

    def noting(state, config, now, **named):
        decided_at.append(now.timestamp())
        return decide(state, config, now, **named)

    monkeypatch.setattr(decision, "decide", noting)
    conversation = Conversation.objects.create(title=SESSION.name, system_prompt=SYSTEM_PROMPT)
    asked = []
    ends = SESSION.turn_ends()
    with SessionClock(True) as clock:
        for index, message in enumerate(SESSION.messages):
            fields = {}
            if message["role"] == "assistant":
                clock.at(SESSION.call_time(index))
                services.ensure_context_summary(conversation)
                context = services.build_context(conversation)
                figures = RequestFigures(context.tokens.total, 0, SESSION.call_time(index))
                fields = {
                    "input_tokens": figures.tokens,
                    **ask_lifetime(conversation, "anthropic", figures),
                }
                asked.append(figures.lifetime)
            clock.at(SESSION.times[index])
            store(conversation, message, **fields)
            if index in ends:
                finish_turn(conversation)

    calls = [i for i, m in enumerate(SESSION.messages) if m["role"] == "assistant"]
    # Each hook decided at the time of the last message its request carries.
    assert sorted({round(t, 3) for t in decided_at}) == sorted(
        {round(SESSION.call_time(i), 3) for i in calls}
    )
    stored = list(conversation.messages.order_by("pk"))
    assert [m.created_at.timestamp() for m in stored] == pytest.approx(SESSION.times)
    answers = [m for m in stored if m.role == Message.Role.ASSISTANT]
    assert all(lifetime is not None for lifetime in asked)
    assert [m.metadata["cache_lifetime"] for m in answers] == [x.name for x in asked]
