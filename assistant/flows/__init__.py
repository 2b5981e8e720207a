"""The entry points: pre-call, post-exchange, overflow, staff, cleanup.

Each module is one flow a caller starts (the hook before a provider call, the
task after an exchange, a staff action, a cleanup run); it runs the steps the
decision returns and owns the order of the writes. May import strategies/,
window/, llm/, text/, store/, settings/, ops/ and models; never the public API
or the faces. See docs/architecture.rst.
"""
