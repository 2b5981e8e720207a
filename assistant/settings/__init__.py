"""The app's settings, each declared and checked by one mechanism (keys):
ASSISTANT_COMPACTION (conf), ASSISTANT_CLEANUP and the beat schedule (cleanup),
and the plain ASSISTANT_* settings (app). Each module is public: they are read
everywhere.

May import: nothing of the app.
See docs/architecture.rst.
"""
