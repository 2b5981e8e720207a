"""The demo's workload generator (the benchmark replays it too): deterministic,
repetitive, with facts asked later."""

import ast
import json
from pathlib import Path

from demo.workload import generate, generate_messages, repeat_share


def test_it_generates_the_same_conversation_from_the_same_seed():
    first, second = generate(60, seed=7), generate(60, seed=7)

    assert first.messages == second.messages
    assert first.facts == second.facts
    assert generate(60, seed=8).messages != first.messages


def test_about_thirty_percent_of_tool_calls_repeat_an_earlier_call():
    workload = generate(300)

    assert 0.25 <= repeat_share(workload) <= 0.35
    reordered = [
        call
        for call in workload.tool_calls()
        if list(json.loads(call["arguments"])) != sorted(json.loads(call["arguments"]))
    ]
    assert reordered  # some repeats list their arguments in another key order


def test_planted_facts_are_asked_later_and_present_when_planted():
    workload = generate(300)
    planted_at = {}
    for turn in workload.turns:
        text = "\n".join(m["content"] for m in turn.messages)
        for fact_id in turn.plants:
            assert workload.facts[fact_id].sentence in text
            planted_at[fact_id] = turn.index
        for fact_id in turn.asks:
            assert planted_at[fact_id] < turn.index
            fact = workload.facts[fact_id]
            assert fact.label in turn.messages[0]["content"]  # asked for by label only
            assert fact.value not in text

    asked = [fact_id for turn in workload.turns for fact_id in turn.asks]
    assert len(asked) == len(set(asked)) >= 50


def test_facts_come_in_varied_shapes_places_and_labels():
    workload = generate(300)
    facts = list(workload.facts.values())

    assert {f.kind for f in facts} == {
        "hex_id",
        "letter_id",
        "uuid",
        "email",
        "amount",
        "path",
        "url",
        "name",
        "secret",
        "hash",
    }
    assert {f.spot for f in facts} == {"user", "beginning", "middle", "end"}
    assert len({f.label for f in facts}) == len(facts)
    assert all(f.value in f.sentence and f.label in f.sentence for f in facts)
    assert not any("FACT-" in f.sentence for f in facts)


def test_it_has_the_sizes_of_the_design_workload():
    workload = generate(300)

    assert 1_500 <= workload.message_count <= 1_700
    assert 700 <= workload.model_calls <= 800
    assert generate_messages(10_000).message_count >= 10_000
    tool_results = [m for m in workload.messages if m["role"] == "tool"]
    posts = [m for m in tool_results if m["tool_name"] == "get_blog_post"]
    assert all(5_000 <= len(m["content"]) <= 32_000 for m in posts)


def test_the_demo_imports_nothing_from_the_benchmark():
    """The benchmark may use the demo's workload, never the reverse: the demo runs
    from a checkout without bench/ and its peers' requirements."""
    demo = Path(__file__).resolve().parent.parent / "demo"
    imported = set()
    for path in demo.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
    assert "demo" in imported
    assert "bench" not in imported
