"""The bench on the sessions' own clock (bench/timing.py, docs/benchmarks.rst "Cache
lifetimes"): ours replayed with each message stored at its `ts` and each pre-call hook
deciding at the time of its call, every request asking the lifetime the app chooses;
and the pricing of requests at the lifetimes they asked for."""

from __future__ import annotations

import pytest

from assistant.models import Message
from assistant.providers import LIFETIMES
from assistant.window import decision
from bench import real
from bench.fake_summarizer import FakeSummarizer
from bench.payload import CostMeter, RequestFigures
from bench.sessions import load_sessions
from bench.timing import asked_cost

FIVE, HOUR = LIFETIMES["anthropic"]
SESSION = next(s for s in load_sessions() if s.name == "cc-spotter-sub-a7be2f0")


def meter(*requests: RequestFigures) -> CostMeter:
    found = CostMeter()
    found.requests.extend(requests)
    return found


def test_a_request_is_warm_within_the_lifetime_the_one_before_asked_for():
    # 10,000 tokens written, then 10 minutes later the same 10,000 and 100 new.
    first = dict(tokens=10_000, cached_tokens=0, at=0.0)
    second = dict(tokens=10_100, cached_tokens=10_000, at=600.0)
    hour = asked_cost(
        meter(RequestFigures(**first, lifetime=HOUR), RequestFigures(**second, lifetime=HOUR)),
        "Anthropic",
    )
    five = asked_cost(
        meter(RequestFigures(**first, lifetime=FIVE), RequestFigures(**second, lifetime=FIVE)),
        "Anthropic",
    )

    assert hour == pytest.approx(2.0 * 10_000 + 0.1 * 10_000 + 2.0 * 100)  # read after 10 min
    assert five == pytest.approx(1.25 * 10_000 + 1.25 * 10_100)  # expired: all written again


@pytest.mark.django_db
def test_ours_replays_on_the_sessions_clock_and_asks_each_requests_lifetime(monkeypatch):
    decided_at = []
    decide = decision.decide

    def noting(state, config, now, **named):
        decided_at.append(now.timestamp())
        return decide(state, config, now, **named)

    monkeypatch.setattr(decision, "decide", noting)

    outcome = real.replay_ours(SESSION, FakeSummarizer(), clock=True)

    assert outcome.error is None
    calls = [i for i, m in enumerate(SESSION.messages) if m["role"] == "assistant"]
    # Each hook decided at the time of the last message its request carries.
    assert sorted({round(t, 3) for t in decided_at}) == sorted(
        {round(SESSION.call_time(i), 3) for i in calls}
    )
    assert [r.at for r in outcome.meter.requests] == [SESSION.call_time(i) for i in calls]
    assert all(r.lifetime is not None for r in outcome.meter.requests)
    stored = Message.objects.filter(conversation__title=f"real {SESSION.name}").order_by("pk")
    assert [m.created_at.timestamp() for m in stored] == pytest.approx(SESSION.times)
    answers = [m for m in stored if m.role == "assistant"]
    assert [m.metadata["cache_lifetime"] for m in answers] == [
        r.lifetime.name for r in outcome.meter.requests
    ]
