"""What an operator watches: telemetry (every span and metric name), the event
log line, and the health checks behind `check_services` and /readyz. Each
module is public.

May import: settings.
See docs/architecture.rst.
"""
