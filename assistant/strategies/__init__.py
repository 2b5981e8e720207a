"""The strategies: tool results, the summary, emergency, fork, previews, and
the pre-call plan's steps that change the window (steps).

One module per kind of compaction, each the one place its rules live. May
import window/, llm/, text/, store/, settings/, ops/ and models; never flows/
or the layers above. See docs/architecture.rst.
"""
