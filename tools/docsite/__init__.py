"""The docs site's parts, each in the module of what loads it.

- `showdoc`: what nbdev loads while it processes the notebooks (`show_doc`'s renderer, the output processors);
- `pages`: a processed notebook as a MkDocs page (its cells, outputs, links and anchors);
- `api_index`: the API index and each module page's "Use from this page" box, from `API_GROUPS`;
- `hooks`: what MkDocs loads (`hooks:` in mkdocs.yml).

`tools/docs.py` runs them in order: nbdev, the pages, `mkdocs build --strict`.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD, STATIC, SITE = ROOT/'_docs_build', ROOT/'docs_src', ROOT/'docs'   # staging (gitignored), extras, the site
MD = BUILD/'md'                                                          # MkDocs' docs_dir
DEFAULT_SECTION = 'API reference'   # notebooks whose front matter names no `section`

class DocsError(Exception): pass
