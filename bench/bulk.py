"""Messages by the thousand through SQL: the bulk of the scale bench's database
(bench/scale.py) and of the plan tests (tests/test_scale.py). Each row is what
add_message would store (its search document included), in one INSERT ... SELECT
over generate_series, so 100,000 rows take seconds.

The texts hold what the searches look for: ``token <md5 of n>`` once in the whole
database (a rare token), ``database`` in a third of the messages (a common word),
``newsletter campaign`` in a seventh (two words). Every assistant message is a
recorded call of claude-sonnet-4-6 (its usage) with a tool call, whose result
follows."""

from __future__ import annotations

from django.db import connection

#: Of every COMMON_EVERY messages, one holds the common word.
COMMON_WORD, COMMON_EVERY = "database", 3
TWO_WORDS, TWO_WORDS_EVERY = "newsletter campaign", 7
#: Words no message holds.
NO_MATCH = "zanzibar quokka"

_INSERT = """
INSERT INTO assistant_message (
    conversation_id, role, content, compaction, blocks_tokens, prepared_compaction,
    tool_call_id, tool_name, tool_arguments, tool_calls, input_tokens, output_tokens,
    token_estimate,
    original_token_estimate, metadata, pinned, provider, model, created_at, search_vector
)
SELECT %(conversation)s, role, content, '', 0, '',
       CASE WHEN role = 'tool' THEN 'c' || n ELSE '' END,
       CASE WHEN role = 'tool' THEN 'read_file' ELSE '' END,
       CASE WHEN role = 'tool' THEN jsonb_build_object('path', 'src/f' || (n %% 50) || '.py')
       END,
       CASE WHEN role = 'assistant' AND n %% 3 = 1 THEN jsonb_build_array(jsonb_build_object(
           'id', 'c' || (n + 1), 'name', 'read_file',
           'arguments', jsonb_build_object('path', 'src/f' || ((n + 1) %% 50) || '.py')))
       END,
       CASE WHEN role = 'assistant' THEN 2000 + n %% 500 END,
       CASE WHEN role = 'assistant' THEN 40 END,
       length(content) / 4, length(content) / 4, '{}', false,
       CASE WHEN role = 'assistant' THEN 'anthropic' ELSE '' END,
       CASE WHEN role = 'assistant' THEN 'claude-sonnet-4-6' ELSE '' END, now(),
       to_tsvector('simple', content)
FROM (
    SELECT n,
           (ARRAY['user', 'assistant', 'tool'])[n %% 3 + 1] AS role,
           'Step ' || n || ': the '
           || CASE WHEN n %% 3 = 0 THEN 'database' ELSE 'cache' END
           || ' query returned ' || (n %% 97) || ' rows, token ' || md5(%(salt)s || n) || '. '
           || CASE WHEN n %% 7 = 0 THEN 'The newsletter campaign went out. ' ELSE '' END
           || repeat('Lorem ipsum dolor sit amet, consectetur adipiscing elit. ', %(filler)s)
           AS content
    FROM generate_series(%(first)s, %(last)s) AS n
) AS rows
ORDER BY n
"""


def rare_token(salt: str, n: int) -> str:
    """The token only message `n` of a bulk with this salt holds."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT md5(%s || %s)", [salt, n])
        return str(cursor.fetchone()[0])


def insert_messages(conversation_id: int, count: int, *, salt: str = "", filler: int = 2) -> None:
    """`count` messages at the end of the conversation; `filler` sentences of about
    57 characters lengthen each text; the salt keeps rare tokens apart between calls."""
    with connection.cursor() as cursor:
        cursor.execute(
            _INSERT,
            {
                "conversation": conversation_id,
                "salt": salt,
                "filler": filler,
                "first": 0,
                "last": count - 1,
            },
        )


def analyze() -> None:
    """Fresh planner statistics, as autovacuum would gather them after a bulk load."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE assistant_message")
        cursor.execute("ANALYZE assistant_conversation")
