"""Summarize after a message (issue 56): the summarized segment a conversation sends
between the messages before it and the newest step, and, on a summary version, the
message a segment summary follows (NULL: a version of the window summary)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("assistant", "0018_sessions")]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="segment_summary",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="summaryversion",
            name="after_message_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
    ]
