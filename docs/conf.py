"""Sphinx configuration of the documentation site (`make docs`)."""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent)]  # the extension, and the app it documents

project = "django-assistant-compaction"
author = "the django-assistant-compaction authors"
copyright = "the django-assistant-compaction authors"
extensions = ["assistant_docs"]
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
