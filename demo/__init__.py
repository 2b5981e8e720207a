"""The demo project's own app: `manage.py demo` and its scenes. Not part of the
`assistant` wheel: it replays its own deterministic workload (`demo/workload.py`,
which the benchmark replays too) and starts a worker of this repository's Celery
app (`config`)."""
