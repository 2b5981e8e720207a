from django.db import migrations, models


class Migration(migrations.Migration):
    """The stored context size. Existing conversations start at NULL ("not
    measured"): the size is the window's own computation, which a migration
    must not import (it follows today's models, not this migration's), so
    the app's post_migrate receiver measures them with the current code
    (assistant.window.measure_unsized)."""

    dependencies = [
        ("assistant", "0009_recall"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="context_tokens",
            field=models.PositiveBigIntegerField(null=True),
        ),
        # New conversations start at 0; the rows above stay NULL.
        migrations.AlterField(
            model_name="conversation",
            name="context_tokens",
            field=models.PositiveBigIntegerField(null=True, default=0),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(fields=["context_tokens"], name="assistant_conv_context"),
        ),
    ]
