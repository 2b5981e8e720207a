"""The wheel's long description (what a package index shows): the README, each
of its links into this repository, which cannot resolve there, turned into text
naming the page. Everything else is declared in pyproject.toml."""

import re
from pathlib import Path

from setuptools import setup

# A Markdown link to a path of this repository (not to a URL or an anchor).
RELATIVE_LINK = re.compile(r"\[([^\]]+)\]\((?![a-z]+://|#)([^)\s]+)\)")


def long_description(readme: str) -> str:
    return RELATIVE_LINK.sub(r"\1 (`\2` in the repository)", readme)


if __name__ == "__main__":
    setup(
        long_description=long_description((Path(__file__).parent / "README.md").read_text()),
        long_description_content_type="text/markdown",
    )
