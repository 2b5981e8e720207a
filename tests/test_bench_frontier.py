"""The bench's frontier on the long real sessions (docs/benchmarks.rst): the dominance
rule with its 1% tolerance, the LangChain target, a peer judged only on the sessions
where none of its requests breaks a tool pair, every strategy of the run on the table,
and what ours' requests are checked for (probes in the artifact index, the bound of the
trigger plus the newest step)."""

from __future__ import annotations

from assistant.providers.convert import to_anthropic
from bench.frontier import aggregate, at_most, dominates, frontier, frontier_lines, frontier_rows
from bench.outcome import Outcome
from bench.payload import CostMeter
from bench.sessions import EVERYTHING, LANGCHAIN, LANGMEM, OPENHANDS, OURS, Session

USER = {"role": "user", "content": "List the files in the repository root."}
CALL = {
    "role": "assistant",
    "content": "Listing.",
    "tool_calls": [{"id": "t1", "name": "Bash", "arguments": {"command": "ls"}}],
}
RESULT = {
    "role": "tool",
    "content": "README.md\nsetup.py",
    "tool_call_id": "t1",
    "tool_name": "Bash",
}
ANSWER = {"role": "assistant", "content": "Two files."}
PROBE = "setup.py"  # asked at the second model call


def replayed(name: str, session: str, requests: list[list[dict]], extra: float = 0.0) -> Outcome:
    """`name` on `session`: these requests in order (the probe asked at the last), plus
    `extra` cost (as a strategy's own summarizer cost)."""
    outcome = Outcome(name, session, CostMeter(), summarizer_cost=extra)
    for n, messages in enumerate(requests):
        probes = [PROBE] if n == len(requests) - 1 else []
        outcome.meter.record(to_anthropic("s", [], messages, check=False), probes)
    return outcome


WHOLE = [[USER], [USER, CALL, RESULT]]  # the second request holds the probe
DROPPED = [[USER], [USER]]  # the call and its result left out: no probe
ORPHAN = [[USER], [USER, RESULT]]  # the result without its call: a broken pair, the probe


def test_a_peer_dominates_when_no_costlier_within_one_percent_keeping_as_many_and_better_on_one():
    assert dominates(98.9, 10, 100.0, 10)  # cheaper beyond the tolerance
    assert dominates(100.9, 11, 100.0, 10)  # within it, and more probes
    assert not dominates(99.5, 10, 100.0, 10)  # the same cost within 1%, the same probes
    assert not dominates(100.0, 10, 100.0, 10)
    assert not dominates(101.1, 11, 100.0, 10)  # costlier beyond the tolerance
    assert not dominates(50.0, 9, 100.0, 10)  # cheaper, fewer probes
    # The LangChain target: at most its cost within 1%, at least its probes.
    assert at_most(101.0, 10, 100.0, 10)
    assert not at_most(101.2, 10, 100.0, 10)
    assert not at_most(50.0, 9, 100.0, 10)


def test_a_peer_is_judged_only_on_the_sessions_where_none_of_its_requests_breaks_a_pair():
    results = {EVERYTHING: [], OURS: [], LANGCHAIN: [], LANGMEM: []}
    for session in ("broken there", "clean there"):
        results[EVERYTHING].append(replayed(EVERYTHING, session, WHOLE))
        results[OURS].append(replayed(OURS, session, DROPPED, extra=500.0))
        results[LANGCHAIN].append(replayed(LANGCHAIN, session, WHOLE, extra=900.0))
    # langmem is cheaper than ours and keeps the probe on both; on the first session one
    # request (of two) has a result without its call.
    results[LANGMEM] = [
        replayed(LANGMEM, "broken there", ORPHAN),
        replayed(LANGMEM, "clean there", WHOLE),
    ]

    broken, clean = frontier(results, trigger=0)

    assert results[LANGMEM][0].meter.requests_with_broken_pair == 1
    assert not broken.points[LANGMEM].clean and broken.points[LANGMEM].broken == 1
    assert broken.dominating(OURS) == [] and broken.judges(OURS) == [LANGCHAIN]
    assert clean.dominating(OURS) == [LANGMEM]
    # LangChain keeps the probe at a higher cost: not dominating, but ours misses its
    # target (fewer probes) on both sessions.
    assert clean.beside_langchain(OURS) is False
    lines = {line.measure.split(": ", 1)[1]: line for line in frontier_lines([broken, clean], 0)}
    dominated = lines["ours dominated by a clean peer"]
    assert (dominated.ours, dominated.baseline, dominated.passed) == (1, 2, False)
    beside = lines["ours at most LangChain's cost (1%) with its probes"]
    assert (beside.ours, beside.passed) == (0, False)
    present = lines["probes present, aggregate"]
    assert (present.ours, present.baseline, present.passed) == (0.0, 1.0, False)
    assert lines["probes lost (neither present nor recoverable)"].ours == 2
    assert lines["requests with a broken tool pair"].passed is True


def test_the_langchain_target_is_not_judged_where_langchain_breaks_a_pair():
    results = {
        EVERYTHING: [replayed(EVERYTHING, "s", WHOLE)],
        OURS: [replayed(OURS, "s", WHOLE)],
        LANGCHAIN: [replayed(LANGCHAIN, "s", ORPHAN)],
    }

    (session,) = frontier(results, trigger=0)

    assert session.beside_langchain(OURS) is None
    header, rows = frontier_rows([session])
    assert rows[0][header.index("ours vs LangChain")] == "LangChain not clean"
    assert rows[0][header.index(LANGCHAIN)].endswith(", 1 broken")


def test_every_strategy_of_the_run_is_on_the_table_and_judged_against_the_clean_peers():
    """A strategy added to the real-session replays (here an "auto" setting of ours) is a
    column of its own with no change to the frontier: its points, and "dominated" where
    a clean peer dominates it; a peer that dominates ours says so."""
    auto = "ours (auto)"
    results = {
        EVERYTHING: [replayed(EVERYTHING, "s", WHOLE)],
        OURS: [replayed(OURS, "s", WHOLE)],
        auto: [replayed(auto, "s", DROPPED, extra=50.0)],
        OPENHANDS: [replayed(OPENHANDS, "s", DROPPED)],
    }

    (session,) = frontier(results, trigger=0)
    header, rows = frontier_rows([session])

    assert header[2:5] == [OURS, auto, OPENHANDS]
    share = results[auto][0].cost / results[EVERYTHING][0].cost
    assert rows[0][header.index(auto)] == f"{share:.3f} / 0 (dominated)"
    assert session.dominating(auto) == [OPENHANDS] and session.dominating(OURS) == []
    assert rows[0][header.index("ours dominated by")] == "none"
    assert rows[1][0] == "all 1 long sessions"
    assert rows[1][header.index(auto)] == f"{share:.3f} / 0 of 1 (dominated on 1)"
    assert aggregate([session], auto).dominated == 1

    # A session that never passes the trigger is not on the frontier.
    assert frontier(results, trigger=results[EVERYTHING][0].meter.largest) == []


def test_the_meter_counts_the_present_probes_the_artifact_index_holds():
    heading = "## Originals:"
    summary = (
        "## Progress\nListed the root; app.cfg was read.\n\n"
        f"{heading} ref m1..m2\nFiles read: /repo/setup.py (ref m2)\n\nAfter the index: tox.ini"
    )
    payload = to_anthropic("s", [summary], [USER], check=False)
    meter = CostMeter(index_heading=heading)

    meter.record(payload, ["setup.py", "app.cfg", "tox.ini", "absent.txt"])

    assert (meter.probes, meter.probes_kept, meter.probes_in_index) == (4, 3, 1)
    # Without a heading (every peer) nothing is counted as in an index.
    plain = CostMeter()
    plain.record(payload, ["setup.py"])
    assert plain.probes_in_index == 0


def test_a_request_may_pass_the_trigger_by_the_newest_step_and_no_more():
    session = Session("s", [USER, CALL, RESULT, ANSWER, USER])
    newest = session.newest_step(3)  # before the answer: the call and its result
    assert newest == [CALL, RESULT]
    assert session.newest_step(1) == [USER] and session.newest_step(5) == [ANSWER, USER]
    payload = to_anthropic("s", [], [USER, CALL, RESULT])
    tokens = CostMeter().record(payload).tokens
    meter = CostMeter(trigger=tokens - 10)

    meter.record(payload, newest_step=10)
    meter.record(payload, newest_step=9)

    assert meter.requests_over_bound == 1
