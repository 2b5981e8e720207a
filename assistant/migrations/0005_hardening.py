# Each tool result references the assistant message whose call it answers, and
# the database holds one result per call (a call id may be reused by a later
# assistant message once its first call was answered).

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

BATCH = 1000


def link_results_to_their_calls(apps, schema_editor):
    """A result answers the latest earlier call with its id that has no result
    yet. A second result for an answered call (stored before the database
    enforced one per call) stays stored, unlinked."""
    Message = apps.get_model("assistant", "Message")
    rows = (
        Message.objects.filter(
            models.Q(role="tool") | models.Q(role="assistant", tool_calls__isnull=False)
        )
        .order_by("conversation_id", "id")
        .values_list("id", "conversation_id", "role", "tool_calls", "tool_call_id")
    )
    conversation_id, unanswered, links = None, {}, []
    for pk, conversation, role, tool_calls, call_id in rows.iterator(chunk_size=BATCH):
        if conversation != conversation_id:
            conversation_id, unanswered = conversation, {}
        if role == "assistant":
            for call in tool_calls or ():
                unanswered.setdefault(call.get("id"), []).append(pk)
        elif unanswered.get(call_id):
            links.append(Message(id=pk, tool_call_message_id=unanswered[call_id].pop()))
        if len(links) >= BATCH:
            Message.objects.bulk_update(links, ["tool_call_message"])
            links = []
    if links:
        Message.objects.bulk_update(links, ["tool_call_message"])


class Migration(migrations.Migration):
    dependencies = [
        ("assistant", "0004_prepared_compaction"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="tool_call_message",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="tool_results",
                to="assistant.message",
            ),
        ),
        migrations.RunPython(link_results_to_their_calls, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="message",
            constraint=models.UniqueConstraint(
                fields=("tool_call_message", "tool_call_id"),
                name="assistant_msg_one_result_per_call",
            ),
        ),
        # Indexes for the scheduled cleanup queries and the admin's filters.
        migrations.RemoveIndex(
            model_name="conversation",
            name="assistant_conv_exchange",
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(
                    ("deleted_at__isnull", True),
                    ("last_exchange_at__isnull", False),
                    models.Q(
                        ("post_exchange_done_at__isnull", True),
                        ("post_exchange_done_at__lt", models.F("last_exchange_at")),
                        _connector="OR",
                    ),
                ),
                fields=["id"],
                name="assistant_conv_unprocessed",
            ),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("summary_lease_expires_at__isnull", False)),
                fields=["summary_lease_expires_at"],
                name="assistant_conv_lease",
            ),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("metadata__has_key", "compaction_through_message_id")),
                fields=["id"],
                name="assistant_conv_through",
            ),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("metadata__has_key", "pending_through_message_id")),
                fields=["id"],
                name="assistant_conv_pending",
            ),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("metadata__summary_deferred", True)),
                fields=["id"],
                name="assistant_conv_fork_deferred",
            ),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("metadata__has_key", "compaction_summary")),
                fields=["-updated_at"],
                name="assistant_conv_summarized",
            ),
        ),
    ]
