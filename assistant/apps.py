from django.apps import AppConfig


class AssistantConfig(AppConfig):
    name = "assistant"
    verbose_name = "Assistant conversations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from assistant import checks  # noqa: F401  (registers the system checks)
        from assistant.conf import check_summarizer_deadline, compaction_config

        # Refuse out-of-range thresholds at start-up (web, worker, commands),
        # naming the key, not at the first exchange.
        check_summarizer_deadline(compaction_config())
