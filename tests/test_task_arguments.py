"""A task message with a malformed argument is refused cleanly by a real worker."""

import logging

import pytest

from assistant.models import Conversation
from assistant.services import add_message, finish_exchange
from assistant.tasks import post_exchange_task
from tests.conftest import wait_until


@pytest.mark.parametrize("argument", ["abc", None, True, [7]])
def test_post_exchange_task_refuses_what_is_not_a_conversation_id(
    celery_worker, caplog, redis_client, argument
):
    caplog.set_level(logging.WARNING, logger="assistant")
    conversation = Conversation.objects.create(title="t")
    add_message(conversation, "user", "hello")

    post_exchange_task.delay(argument)
    finish_exchange(conversation)

    # The worker is still there and takes the next task.
    def processed():
        conversation.refresh_from_db()
        return conversation.post_exchange_done_at is not None

    assert wait_until(processed)
    refusals = [r for r in caplog.records if "post_exchange_refused" in r.getMessage()]
    assert [r.event["reason"] for r in refusals] == ["not_an_id"]
    assert redis_client.llen("compaction") == 0
