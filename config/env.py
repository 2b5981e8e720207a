"""Strict parsing of environment variables.

Every reader raises ImproperlyConfigured naming the variable when its value
is malformed, so a typo in a deployment fails at start-up, not at 3 a.m.
"""

import json
import os
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str = "") -> str:
    value = _raw(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false/1/0), got {value!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and parsed < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {parsed}")
    return parsed


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = _raw(name)
    if value is None:
        return default
    try:
        parsed = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None
    if minimum is not None and parsed < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {parsed}")
    return parsed


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: set[str]) -> str:
    value = env_str(name, default).lower()
    if value not in choices:
        raise ImproperlyConfigured(
            f"{name} must be one of {', '.join(sorted(choices))}, got {value!r}"
        )
    return value


def env_json_object(name: str) -> dict[str, Any]:
    value = _raw(name)
    if value is None:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{name} must be a JSON object: {exc}") from None
    if not isinstance(parsed, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, got {type(parsed).__name__}")
    return parsed


def env_database(name: str, default: str) -> dict[str, Any]:
    value = env_str(name, default)
    try:
        config = dj_database_url.parse(value, conn_max_age=0)
    except Exception as exc:  # dj-database-url raises several types for bad URLs
        raise ImproperlyConfigured(f"{name} is not a valid database URL: {exc}") from None
    if not config.get("ENGINE"):
        raise ImproperlyConfigured(f"{name} has an unsupported scheme: {value.split(':', 1)[0]!r}")
    return dict(config)


def env_url(name: str, default: str, schemes: set[str]) -> str:
    value = env_str(name, default)
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name} must be a URL with scheme {', '.join(sorted(schemes))}, got scheme {scheme!r}"
        )
    return value
