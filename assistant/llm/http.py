"""What the SDK clients share: their HTTP stack's hooks."""

from __future__ import annotations

from collections.abc import Callable

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
