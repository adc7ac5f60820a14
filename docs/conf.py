# Sphinx configuration of tdsl's documentation (Markdown pages through MyST).
# Built by tests/test_docs.py with warnings as errors and nitpicky cross-references:
#     python -m sphinx -W --keep-going -n -b html docs docs/_build/html
project = "tdsl"
author = "the tdsl developers"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3          # [text](page.md#a-heading) links are checked
nitpicky = True                   # every {py:...} reference must resolve
html_theme = "alabaster"
html_static_path = []
add_module_names = True
