"""The app's settings: ASSISTANT_COMPACTION (conf), ASSISTANT_CLEANUP
(cleanup) and the plain ASSISTANT_* settings (app), each declared and checked by
one mechanism (keys).

May import nothing of the app but each other. See docs/architecture.rst.
"""
