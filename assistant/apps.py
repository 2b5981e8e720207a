import functools

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AssistantConfig(AppConfig):
    name = "assistant"
    verbose_name = "Assistant conversations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from assistant import checks  # noqa: F401  (registers the system checks)
        from assistant.history import queued_exchanges_older_than
        from assistant.ops import telemetry
        from assistant.settings.conf import check_summarizer_deadline, compaction_config
        from assistant.window import measure_unsized

        # Refuse out-of-range thresholds at start-up (web, worker, commands),
        # naming the key, not at the first exchange.
        check_summarizer_deadline(compaction_config())
        # Conversations stored before the size column get it measured once the
        # schema is current (migration 0010 cannot run today's code).
        post_migrate.connect(measure_unsized, sender=self, dispatch_uid="assistant.measure_unsized")
        # A backlog the operator sees: exchanges the worker has not taken for a minute.
        telemetry.observe_queued_stale(
            functools.partial(queued_exchanges_older_than, telemetry.QUEUED_STALE_SECONDS)
        )
