"""Pure functions over text and content blocks: identifiers, statements,
facts, artifacts, truncation, blocks, tokens.

No database, no provider. May import settings/ and models (for constants);
nothing above. See docs/architecture.rst.
"""
