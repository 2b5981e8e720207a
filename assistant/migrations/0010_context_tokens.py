from django.db import migrations, models


def store_sizes(apps, schema_editor):
    """The size of every existing conversation's context, as the window computes
    it (the app's own function: the list's figure must be that one, not a copy)."""
    from assistant.window import refresh_size

    Conversation = apps.get_model("assistant", "Conversation")
    for pk in Conversation.objects.order_by("pk").values_list("pk", flat=True).iterator():
        refresh_size(pk)


class Migration(migrations.Migration):
    dependencies = [
        ("assistant", "0009_recall"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="context_tokens",
            field=models.PositiveBigIntegerField(db_default=0, default=0),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(fields=["context_tokens"], name="assistant_conv_context"),
        ),
        migrations.RunPython(store_sizes, migrations.RunPython.noop, elidable=True),
    ]
