"""The demo project's own app: `manage.py demo` and its scenes. Not part of the
`assistant` wheel: it replays the benchmark's workload (`bench/`) and starts a
worker of this repository's Celery app (`config`)."""
