"""Sphinx configuration of the documentation site (`make docs`)."""

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent)]  # the extension, and the app it documents

import django  # noqa: E402  (after the path that finds the app)

project = "django-assistant-compaction"
author = "the django-assistant-compaction authors"
copyright = "the django-assistant-compaction authors"
extensions = ["assistant_docs", "sphinx.ext.autodoc"]
# The API reference (api.rst) imports the app: Django set up on the test settings.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
django.setup()
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_inherit_docstrings = False
# Type hints name models, Django's and the standard library's classes, which
# this site does not document: they stay plain text rather than links. Every
# other cross-reference (a function named in prose) must resolve.
nitpick_ignore_regex = [
    ("py:class", r"(assistant|collections|contextlib|datetime|django|typing)\..*|.*[\['].*")
]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_theme_options = {
    "description": "Context compaction for LLM chat backends",
    "fixed_sidebar": True,
    "page_width": "1360px",
    "body_max_width": "none",
}
html_css_files = ["custom.css"]
html_static_path = ["_static"]
html_title = project
pygments_style = "sphinx"
nitpicky = True
