"""What the SDK clients share: their HTTP stack's hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2


def retry_after_cap(seconds: float) -> Callable[[httpx2.Response], None]:
    """An httpx response hook capping the server's retry-after: the SDK sleeps whatever it is
    told (an hour, or a date), and the total time of a call must stay bounded."""

    def cap(response: httpx2.Response) -> None:
        for name, limit in (("retry-after-ms", seconds * 1000), ("retry-after", seconds)):
            value = response.headers.get(name)
            if value is None:
                continue
            try:
                too_long = float(value) > limit
            except ValueError:
                too_long = True  # an HTTP date
            if too_long:
                response.headers[name] = f"{limit:g}"

    return cap


def sdk_client(
    client_class: type,
    http_client_class: type,
    *,
    api_key: str,
    base_url: str | None,
    timeout: float,
    max_retries: int,
) -> Any:
    """An anthropic or openai client (`anthropic.Anthropic` with
    `anthropic.DefaultHttpxClient`, or openai's pair). The SDK retries 408/409/429/5xx
    and connection errors itself, honouring retry-after(-ms), capped here at one
    timeout; the timeout bounds each attempt (the SDKs' default is 600 s)."""
    http_client = http_client_class(event_hooks={"response": [retry_after_cap(timeout)]})
    return client_class(
        api_key=api_key,
        base_url=base_url,
        timeout=timeout,
        max_retries=max_retries,
        http_client=http_client,
    )
