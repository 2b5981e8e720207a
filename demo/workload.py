"""Deterministic, tool-heavy conversations of a blog-admin assistant.

Plain data, no Django: `make demo` and the benchmark both replay it. A
conversation is a list of `Turn`s; each turn holds neutral message dicts
(role, content, tool_calls, tool_call_id, tool_name) in order: the user
message, one to three rounds of an assistant message with tool calls and
their results, and the final assistant answer. Each assistant message is one
model call.

About 30% of tool calls repeat an earlier call identically (some with the
JSON keys of their arguments reordered). Facts are planted in user messages
and at the beginning, middle or end of tool results, each a sentence binding a
value of a real-world shape (ids with letters and hex digits, UUIDs, emails,
amounts, paths, URLs, names, plain-word secrets) to a label: "The webhook
secret for the autumn newsletter is marmalade-sky." Later user turns ask for
them by label only, and `Turn.asks` records which facts those turns need.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

SYSTEM_PROMPT = (
    "You are the assistant of a blog's editorial team. You read and edit posts, "
    "run read-only SQL against the blog database, fetch pages from the web, and "
    "answer questions about what you found. Tools: get_blog_post(post_id), "
    "run_sql(query), fetch_url(url), list_posts(status, page)."
)

_WORDS = [
    "content",
    "editor",
    "draft",
    "publish",
    "review",
    "schedule",
    "category",
    "tag",
    "author",
    "reader",
    "comment",
    "analytics",
    "traffic",
    "growth",
    "newsletter",
    "campaign",
    "headline",
    "summary",
    "image",
    "gallery",
    "caption",
    "layout",
    "template",
    "widget",
    "sidebar",
    "footer",
    "header",
    "navigation",
    "search",
    "index",
    "archive",
    "feed",
    "subscription",
    "audience",
    "engagement",
    "conversion",
    "funnel",
    "landing",
    "keyword",
    "ranking",
    "backlink",
    "crawler",
    "sitemap",
    "redirect",
    "cache",
    "latency",
    "server",
    "deploy",
    "release",
    "version",
    "migration",
    "backup",
    "restore",
    "policy",
    "privacy",
    "cookie",
    "consent",
    "banner",
    "discount",
    "coupon",
    "product",
    "review",
    "rating",
    "recipe",
    "travel",
    "garden",
    "kitchen",
    "budget",
    "weekend",
    "morning",
    "evening",
    "season",
    "spring",
    "autumn",
    "winter",
    "summer",
    "mountain",
    "river",
    "coast",
    "city",
    "village",
    "market",
    "coffee",
    "bread",
    "cheese",
    "wine",
    "paper",
    "story",
]

_FIRST = [
    "Margaret",
    "Tomasz",
    "Ayodele",
    "Ingrid",
    "Rafael",
    "Keiko",
    "Dmitri",
    "Lucia",
    "Oskar",
    "Priya",
]
_LAST = ["Okafor", "Lindqvist", "Moreau", "Castellano", "Nakamura", "Brennan", "Haddad", "Kowalski"]
_SECRET_WORDS = [
    "marmalade",
    "sky",
    "velvet",
    "harbor",
    "copper",
    "lantern",
    "quiet",
    "orchid",
    "thunder",
    "pebble",
    "saffron",
    "glacier",
    "meadow",
    "ember",
    "violet",
    "tundra",
]
# What a fact is about ("the webhook secret for the autumn newsletter"): a thing of the
# value's kind and a purpose; every label is used once per workload.
_THINGS = {
    "hex_id": ("invoice number", "ticket id", "build tag", "licence key"),
    "letter_id": ("order reference", "booking reference", "tracking code", "voucher code"),
    "uuid": ("tenant id", "API client id", "workspace id"),
    "email": ("contact address", "billing contact", "press contact"),
    "amount": ("agreed fee", "refund amount", "monthly budget"),
    "path": ("template file", "export location", "config file"),
    "url": ("dashboard link", "signup page", "feedback form"),
    "name": ("guest author", "legal reviewer", "photographer"),
    "secret": ("webhook secret", "staging password", "preview passphrase"),
    "hash": ("release commit", "backup checksum"),
}
_PURPOSES = (
    "autumn newsletter",
    "Lisbon partner",
    "spring campaign",
    "podcast launch",
    "recipe series",
    "winter sale",
    "travel guide",
    "city festival",
    "coffee column",
    "garden special",
    "market report",
    "river cleanup",
    "village fair",
    "mountain issue",
    "cheese tasting",
    "wine club",
)
_TEMPLATES = (
    "The {label} is {value}.",
    "For the record, the {label} is {value}.",
    "Note that the {label} is now {value}.",
    "We settled on {value} as the {label}.",
    "Please use {value} for the {label} from now on.",
    "Heads up: the {label} changed to {value}.",
)
_QUESTIONS = (
    "What was the {label} again?",
    "Remind me of the {label}, please, exactly as given.",
    "Which value did we have for the {label}?",
)
_FACT_SPOTS = ("beginning", "middle", "end")
_STATUSES = ("published", "draft", "scheduled", "archived")
_DOMAINS = ("example.com", "news.example.org", "partner-blog.example.net", "docs.example.io")


# Every fact sentence generated in this process: the fake summarizer recognizes facts by
# them (as a model would by meaning), never by a shape the engine could be tuned to.
PLANTED_SENTENCES: set[str] = set()


@dataclass(frozen=True)
class Fact:
    id: str  # fact-12: the benchmark's own key, never in the conversation's text
    value: str  # what a later turn asks for: the retention checks look for it
    label: str  # what the value is, and how it is asked for: "webhook secret for the ..."
    sentence: str  # the planted text, "The webhook secret for the ... is marmalade-sky."
    kind: str  # hex_id, letter_id, uuid, email, amount, path, url, name, secret, hash
    planted_turn: int
    planted_in: str  # "user" or a tool name
    spot: str = "user"  # where in a tool result: beginning, middle or end


@dataclass
class Turn:
    index: int
    messages: list[dict[str, Any]]
    plants: list[str] = field(default_factory=list)  # fact ids planted in this turn
    asks: list[str] = field(default_factory=list)  # fact ids this turn's user message asks for

    @property
    def model_calls(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "assistant")


@dataclass
class Workload:
    name: str
    seed: int
    system_prompt: str
    turns: list[Turn]
    facts: dict[str, Fact]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [m for turn in self.turns for m in turn.messages]

    @property
    def message_count(self) -> int:
        return sum(len(turn.messages) for turn in self.turns)

    @property
    def model_calls(self) -> int:
        return sum(turn.model_calls for turn in self.turns)

    def tool_calls(self) -> list[dict[str, Any]]:
        return [c for m in self.messages for c in (m.get("tool_calls") or [])]


def _message(role: str, content: str, **fields: Any) -> dict[str, Any]:
    return {
        "role": role,
        "content": content,
        "tool_calls": fields.get("tool_calls"),
        "tool_call_id": fields.get("tool_call_id", ""),
        "tool_name": fields.get("tool_name", ""),
    }


class _Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        # A pool of paragraphs keeps generation fast (10,000 messages in about a second).
        self.paragraphs = [self._sentences(self.rng.randint(3, 7)) for _ in range(300)]
        self.post_sizes = {pid: self.rng.randint(5_000, 30_000) for pid in range(1, 61)}
        self.post_cache: dict[int, str] = {}
        self.facts: dict[str, Fact] = {}
        self.unasked: list[str] = []
        self.labels: set[str] = set()
        self.pending_asks: dict[int, list[str]] = {}
        # Calls that may be repeated, and every call made (a call whose result
        # holds a fact is made once: the world stays consistent).
        self.history: list[tuple[str, dict[str, Any]]] = []
        self.used: set[tuple[str, str]] = set()
        self.call_seq = 0

    # --- text -------------------------------------------------------------

    def _sentences(self, count: int) -> str:
        out = []
        for _ in range(count):
            words = [self.rng.choice(_WORDS) for _ in range(self.rng.randint(8, 18))]
            out.append(" ".join(words).capitalize() + ".")
        return " ".join(out)

    def _paragraphs(self, chars: int) -> list[str]:
        out, size = [], 0
        while size < chars:
            para = self.rng.choice(self.paragraphs)
            out.append(para)
            size += len(para) + 8
        return out

    # --- facts ------------------------------------------------------------

    def _new_fact(self, turn: int, planted_in: str) -> Fact:
        r = self.rng
        kind = r.choice(list(_THINGS))
        value = self._value(kind)
        label = self._label(kind)
        sentence = r.choice(_TEMPLATES).format(label=label, value=value)
        sentence = sentence[0].upper() + sentence[1:]
        spot = "user" if planted_in == "user" else r.choice(_FACT_SPOTS)
        fid = f"fact-{len(self.facts) + 1}"
        fact = Fact(fid, value, label, sentence, kind, turn, planted_in, spot)
        self.facts[fid] = fact
        PLANTED_SENTENCES.add(sentence)
        self.unasked.append(fid)
        # Asked 4 to 40 turns later, or 40 to 150 (if the conversation lasts that long).
        delay = r.randint(4, 40) if r.random() < 0.5 else r.randint(40, 150)
        self.pending_asks.setdefault(turn + delay, []).append(fid)
        return fact

    def _label(self, kind: str) -> str:
        r = self.rng
        for _ in range(20):
            label = f"{r.choice(_THINGS[kind])} for the {r.choice(_PURPOSES)}"
            if label not in self.labels:
                break
        else:  # a very long conversation used them all: number the repeats
            label = f"{label} (number {len(self.labels)})"
        self.labels.add(label)
        return label

    def _value(self, kind: str) -> str:  # noqa: C901
        r = self.rng
        upper = "ABCDEFGHJKLMNPQRSTUVWXYZ"
        if kind == "hex_id":
            if r.random() < 0.3:
                return f"0x{r.getrandbits(32):08X}"
            return f"{r.choice(('INV', 'TCK', 'BLD', 'LIC'))}-{r.getrandbits(20):05X}"
        if kind == "letter_id":
            chars = [r.choice(upper) for _ in range(3)] + [str(r.randint(0, 9)) for _ in range(2)]
            r.shuffle(chars)
            return f"{r.choice(upper)}{r.choice(upper)}-{''.join(chars)}"
        if kind == "uuid":
            return str(uuid.UUID(int=r.getrandbits(128), version=4))
        if kind == "email":
            domain = r.choice(_DOMAINS)
            return f"{r.choice(_FIRST).lower()}.{r.choice(_LAST).lower()}@{domain}"
        if kind == "amount":
            amount = r.randint(100, 99_999)
            cents = r.randint(0, 99)
            return r.choice(
                (
                    f"${amount:,}.{cents:02d}",
                    f"€{amount:,}",
                    f"USD {amount:,}",
                    f"£{amount:,}.{cents:02d}",
                )
            )
        if kind == "path":
            words = [r.choice(_WORDS) for _ in range(3)]
            ext = r.choice(("yaml", "mjml", "csv", "json", "tar.gz"))
            if r.random() < 0.5:
                return f"/srv/{words[0]}/{words[1]}_{r.randint(1, 99)}/{words[2]}.{ext}"
            return f"exports/{words[0]}-{words[1]}/{words[2]}-v{r.randint(2, 9)}.{ext}"
        if kind == "url":
            words = [r.choice(_WORDS) for _ in range(2)]
            token = "".join(r.choice("abcdefghjkmnpqrstuvwxyz0123456789") for _ in range(6))
            return f"https://{r.choice(_DOMAINS)}/{words[0]}/{token}?ref={words[1]}"
        if kind == "name":
            return f"{r.choice(_FIRST)} {r.choice(_LAST)}"
        if kind == "secret":
            first, second = r.sample(_SECRET_WORDS, 2)
            return f"{first}-{second}"
        return "".join(r.choice("0123456789abcdef") for _ in range(r.choice((8, 12, 40))))

    def _spot(self, items: list[str], fact: Fact, first: int = 0) -> int:
        """Where a fact goes in a list of lines or paragraphs: first, middle or last."""
        if fact.spot == "beginning":
            return first
        if fact.spot == "end":
            return len(items)
        return (first + len(items)) // 2

    # --- tool calls and results ---------------------------------------------

    def _fresh_call(self) -> tuple[str, dict[str, Any]]:
        r = self.rng
        tool = r.choices(("get_blog_post", "run_sql", "fetch_url", "list_posts"), (4, 3, 2, 1))[0]
        self.call_seq += 1
        if tool == "get_blog_post":
            return tool, {"post_id": r.randint(1, 60), "include_comments": r.random() < 0.5}
        if tool == "run_sql":
            table = r.choice(("posts", "comments", "orders", "subscribers", "page_views"))
            limit = r.choice((5, 20, 50, 100))
            return tool, {
                "query": f"SELECT * FROM {table} WHERE id > {r.randint(1, 5000)} LIMIT {limit}",
                "database": "blog",
            }
        if tool == "fetch_url":
            slug = "-".join(r.choice(_WORDS) for _ in range(3))
            return tool, {"url": f"https://{r.choice(_DOMAINS)}/{slug}", "timeout": 10}
        return tool, {"status": r.choice(_STATUSES), "page": r.randint(1, 6), "per_page": 25}

    def _call(self, call_id: str) -> tuple[dict[str, Any], bool]:
        """A tool call (arguments as a JSON string, as providers stream them) and
        whether it repeats an earlier one."""
        r = self.rng
        repeat = bool(self.history) and r.random() < 0.30
        if repeat:
            tool, args = r.choice(self.history)
            if r.random() < 0.5:  # same call, keys reordered and spaced differently
                args = dict(reversed(list(args.items())))
                text = json.dumps(args, indent=r.choice((None, 1)))
            else:
                text = json.dumps(args)
        else:
            tool, args = self._fresh_call()
            while (tool, json.dumps(args, sort_keys=True)) in self.used:
                tool, args = self._fresh_call()
            self.used.add((tool, json.dumps(args, sort_keys=True)))
            self.history.append((tool, args))
            text = json.dumps(args)
        return {"id": call_id, "name": tool, "arguments": text}, repeat

    def _result(self, call: dict[str, Any], fact: Fact | None) -> str:
        args = json.loads(call["arguments"])
        tool = call["name"]
        # Repeated calls return the same text; a planted fact makes the call unique.
        seed_rng = random.Random(f"{tool}:{json.dumps(args, sort_keys=True)}")
        saved, self.rng = self.rng, seed_rng
        try:
            if tool == "get_blog_post":
                text = self._post_html(args["post_id"], fact)
            elif tool == "run_sql":
                text = self._sql_table(args["query"], fact)
            elif tool == "fetch_url":
                text = self._page(args["url"], fact)
            else:
                text = self._post_list(args, fact)
        finally:
            self.rng = saved
        return text

    def _post_html(self, post_id: int, fact: Fact | None) -> str:
        paras = self._paragraphs(self.post_sizes[post_id])
        if fact:
            paras.insert(self._spot(paras, fact), fact.sentence)
        body = "\n".join(f'  <p class="body">{p}</p>' for p in paras)
        return (
            f'<article id="post-{post_id}" data-status="published">\n'
            f"  <h1>{self._sentences(1)}</h1>\n"
            f'  <div class="meta">by {self.rng.choice(_FIRST)} · post-{post_id}</div>\n'
            f"{body}\n</article>"
        )

    def _sql_table(self, query: str, fact: Fact | None) -> str:
        limit = int(query.rsplit(" ", 1)[1])
        rows = ["| id | title | status | views | updated |", "|---|---|---|---|---|"]
        for i in range(limit):
            title = " ".join(self.rng.choice(_WORDS) for _ in range(5))
            rows.append(
                f"| {1000 + i} | {title} | {self.rng.choice(_STATUSES)} | "
                f"{self.rng.randint(0, 90_000)} | 2024-{self.rng.randint(1, 12):02d}-"
                f"{self.rng.randint(1, 28):02d} |"
            )
        if fact:
            rows.insert(
                self._spot(rows, fact, 2), f"| {999 - limit} | {fact.sentence} | draft | 0 | |"
            )
        return "\n".join(rows) + f"\n({limit} rows)"

    def _page(self, url: str, fact: Fact | None) -> str:
        paras = self._paragraphs(self.rng.randint(3_000, 20_000))
        if fact:
            paras.insert(self._spot(paras, fact), fact.sentence)
        body = "\n".join(f"<p>{p}</p>" for p in paras)
        return f"<html><head><title>{url}</title></head><body>\n{body}\n</body></html>"

    def _post_list(self, args: dict[str, Any], fact: Fact | None) -> str:
        lines = [f"Posts with status {args['status']}, page {args['page']}:"]
        for _ in range(args["per_page"]):
            title = " ".join(self.rng.choice(_WORDS) for _ in range(6)).capitalize()
            post, comments = self.rng.randint(1, 60), self.rng.randint(0, 40)
            lines.append(f"- post-{post}: {title} ({comments} comments)")
        if fact:
            lines.insert(self._spot(lines, fact, 1), f"- {fact.sentence}")
        return "\n".join(lines)

    # --- turns ------------------------------------------------------------

    def turn(self, index: int) -> Turn:
        r = self.rng
        turn = Turn(index=index, messages=[])
        asks = [f for f in self.pending_asks.pop(index, []) if f in self.unasked][:2]
        for fid in asks:
            self.unasked.remove(fid)
        turn.asks = asks
        plant_user = r.random() < 0.15
        plant_tool = r.random() < 0.22
        user_text = self._sentences(r.randint(1, 3))
        if plant_user:
            fact = self._new_fact(index, "user")
            turn.plants.append(fact.id)
            user_text = f"Please note for later: {fact.sentence} {user_text}"
        for fid in asks:
            question = r.choice(_QUESTIONS).format(label=self.facts[fid].label)
            user_text += f" {question}"
        turn.messages.append(_message("user", user_text))

        rounds = r.choices((1, 2, 3), (50, 47, 3))[0]
        for round_no in range(rounds):
            calls, repeats = [], {}
            for k in range(r.choices((1, 2), (82, 18))[0]):
                call, repeats[f"call_{index}_{round_no}_{k}"] = self._call(
                    f"call_{index}_{round_no}_{k}"
                )
                calls.append(call)
            preamble = self._sentences(1) if r.random() < 0.4 else ""
            turn.messages.append(_message("assistant", preamble, tool_calls=calls))
            for call in calls:
                fact = None
                if plant_tool and not repeats[call["id"]]:
                    plant_tool = False
                    fact = self._new_fact(index, call["name"])
                    turn.plants.append(fact.id)
                    # A result with a fact is never asked for again, so never deduplicated.
                    self.history.remove((call["name"], json.loads(call["arguments"])))
                turn.messages.append(
                    _message(
                        "tool",
                        self._result(call, fact),
                        tool_call_id=call["id"],
                        tool_name=call["name"],
                    )
                )
        answer = self._paragraphs(r.randint(200, 900))
        turn.messages.append(_message("assistant", " ".join(answer)[:900]))
        return turn


def generate(turns: int = 300, *, seed: int = 7, name: str | None = None) -> Workload:
    """A conversation of `turns` turns; the same seed always gives the same conversation."""
    gen = _Generator(seed)
    out = [gen.turn(i) for i in range(turns)]
    return Workload(
        name=name or f"{turns} turns",
        seed=seed,
        system_prompt=SYSTEM_PROMPT,
        turns=out,
        facts=gen.facts,
    )


def generate_messages(count: int, *, seed: int = 11) -> Workload:
    """At least `count` messages, cut at a turn boundary (for the scaling runs)."""
    gen = _Generator(seed)
    out: list[Turn] = []
    total = 0
    while total < count:
        turn = gen.turn(len(out))
        out.append(turn)
        total += len(turn.messages)
    return Workload(f"{total} messages", seed, SYSTEM_PROMPT, out, gen.facts)


def repeat_share(workload: Workload) -> float:
    """Share of tool calls that repeat an earlier (tool, canonical arguments) call."""
    seen: set[tuple[str, str]] = set()
    repeats = total = 0
    for call in workload.tool_calls():
        key = (call["name"], json.dumps(json.loads(call["arguments"]), sort_keys=True))
        total += 1
        repeats += key in seen
        seen.add(key)
    return repeats / total if total else 0.0


if __name__ == "__main__":  # quick look: python -m demo.workload
    for size in (60, 300):
        w = generate(size)
        chars = sum(len(m["content"]) for m in w.messages)
        asked = sum(len(t.asks) for t in w.turns)
        print(
            f"{w.name}: {w.message_count} messages, {w.model_calls} model calls, "
            f"{chars / 1e6:.1f} MB, repeats {repeat_share(w):.0%}, "
            f"{len(w.facts)} facts, {asked} asked"
        )
