"""Pure functions over text and content blocks: identifiers, statements,
facts, artifacts, paths, truncation, blocks, tokens; and the one check of the
public entry points' arguments (arguments).

No database, no provider. May import settings/ and models (for constants);
nothing above, but text/statements.py (sentence picking, which belongs here: a
declared exception in .importlinter). See docs/architecture.rst.
"""
