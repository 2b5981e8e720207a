"""The app's settings, each validated once: ASSISTANT_COMPACTION (conf),
ASSISTANT_CLEANUP and the beat schedule (schedule), and the plain ASSISTANT_*
settings (app). Each module is public: they are read everywhere.

May import: nothing of the app.
See docs/architecture.rst.
"""
