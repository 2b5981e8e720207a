from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from assistant.ops.health import check_database, check_redis

HOW_TO_START = "\n".join(
    [
        "Start them, then run this again:",
        "  - on this machine:",
        "      pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
        '      redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no',
        "  - or with Docker: docker compose up -d postgres redis",
        "  - or point the tests elsewhere with TEST_DATABASE_URL and TEST_REDIS_URL.",
    ]
)


class Command(BaseCommand):
    help = "Check that the database and Redis answer (run before the test suite)."

    def handle(self, *args: Any, **options: Any) -> None:
        db = settings.DATABASES["default"]
        checks = [check_database(), check_redis()]
        for check in checks:
            state = "ok" if check.ok else "NOT ANSWERING"
            self.stdout.write(f"{check.name}: {state} ({check.detail})")
        if not all(check.ok for check in checks):
            where = f"{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}"
            raise CommandError(f"PostgreSQL ({where}) or Redis is not answering.\n{HOW_TO_START}")
