"""The cache check (issue 54): a CompactionEvent of kind `cache_break` records a
provider reading less from its cache than the unchanged prefix the request expected
(assistant.window.cache_check). Only the kind's choices change."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('assistant', '0019_cut'),
    ]

    operations = [
        migrations.AlterField(
            model_name='compactionevent',
            name='kind',
            field=models.CharField(choices=[('tool_results', 'Tool results compacted'), ('dedup', 'Duplicate tool results stubbed'), ('window_summary', 'Window summary'), ('emergency_1', 'Emergency compaction, level 1'), ('emergency_2', 'Emergency compaction, level 2'), ('fork_summary', 'Fork summary'), ('restore', 'Originals restored'), ('media', 'Old images, documents and thinking compacted'), ('provider', 'Compacted by the provider'), ('provider_failed', "The provider's compaction failed"), ('cache_break', "The provider's cache missed an unchanged prefix")], max_length=32),
        ),
    ]
