"""What an operator watches: telemetry, the event log line, health checks.

May import settings/ only. See docs/architecture.rst.
"""
