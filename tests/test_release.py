"""The version a user sees is one: `ddpsafe.__version__` is what the landing page (and so README.md) prints, and
CHANGELOG.md has an entry for it, below an Unreleased section. The classifiers name no Python older than
`requires-python`, and no license classifier beside the SPDX `license` expression (setuptools refuses both together)."""
from __future__ import annotations
import re, json, tomllib
from pathlib import Path
import ddpsafe

ROOT = Path(__file__).resolve().parents[1]

def test_landing_page_shows_the_version():
    nb = json.loads((ROOT/'nbs'/'index.ipynb').read_text())
    cell = next(c for c in nb['cells'] if c['cell_type'] == 'code' and '__version__' in ''.join(c['source']))
    printed = ''.join(''.join(o.get('text', '')) for o in cell['outputs']).strip()
    assert printed == f'ddpsafe {ddpsafe.__version__}', f'nbs/index.ipynb shows {printed!r}: run the cell again (nbdev-test --save) and python tools/readme.py'
    assert f'ddpsafe {ddpsafe.__version__}' in (ROOT/'README.md').read_text()

def test_changelog_has_the_version():
    log = (ROOT/'CHANGELOG.md').read_text()
    heads = re.findall(r'^## \[([^\]]+)\]', log, re.M)
    assert heads[:1] == ['Unreleased'], heads
    assert ddpsafe.__version__ in heads, f'CHANGELOG.md has no entry for {ddpsafe.__version__}: {heads}'
    assert re.search(rf'^## \[{re.escape(ddpsafe.__version__)}\] - \d{{4}}-\d\d-\d\d$', log, re.M), 'the entry needs its date'

def test_classifiers_agree_with_requires_python():
    proj = tomllib.loads((ROOT/'pyproject.toml').read_text())['project']
    oldest = tuple(map(int, re.match(r'>=\s*(\d+)\.(\d+)', proj['requires-python']).groups()))
    pys = [tuple(map(int, c.rsplit(':: ', 1)[1].split('.'))) for c in proj['classifiers'] if re.fullmatch(r'Programming Language :: Python :: 3\.\d+', c)]
    assert pys and min(pys) == oldest, (pys, oldest)
    assert not [c for c in proj['classifiers'] if c.startswith('License ::')] and proj['license'] == 'Apache-2.0'
    assert (ROOT/'LICENSE').read_text().lstrip().startswith('Apache License')
