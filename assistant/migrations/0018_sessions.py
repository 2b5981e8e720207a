"""Sessions and the tree (issue 52): how each conversation is linked to its parent
(session, continuation or branch) and the child its tree shows below it. Existing
forks get their kind as they say it today: one with a fork message is a branch
(fork_from_message), any other with a parent a continuation (fork_continuation)."""

import django.db.models.deletion
from django.db import migrations, models


def link_existing_forks(apps, schema_editor):
    Conversation = apps.get_model("assistant", "Conversation")
    forks = Conversation.objects.filter(parent_conversation__isnull=False)
    forks.filter(fork_message_id__isnull=False).update(parent_link="branch")
    forks.filter(fork_message_id__isnull=True).update(parent_link="continuation")


class Migration(migrations.Migration):
    dependencies = [("assistant", "0017_vectors")]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="parent_link",
            field=models.CharField(
                blank=True,
                choices=[
                    ("session", "Session"),
                    ("continuation", "Continuation"),
                    ("branch", "Branch"),
                ],
                default="",
                db_default="",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="conversation",
            name="active_branch",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="assistant.conversation",
            ),
        ),
        migrations.RunPython(link_existing_forks, migrations.RunPython.noop),
    ]
