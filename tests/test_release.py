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

def test_changelog_reads_short():
    "Each entry says in at most 3 lines what a user can do or must change; no link points at a tag the history lacks"
    log = (ROOT/'CHANGELOG.md').read_text()
    entries = re.findall(r'^- .*(?:\n  .*)*', log, re.M)
    assert entries and all(len(e.splitlines()) <= 3 for e in entries), [e for e in entries if len(e.splitlines()) > 3]
    assert not re.search(r'/(?:compare|releases/tag)/', log), 'CHANGELOG.md links a tag or a compare between tags'

def test_readme_first_command_runs_its_example():
    """The README's first command sets up the environment its train.py runs in (tests/test_apps.py runs it there), and the
    install is one pip call for torch, torchvision and ddpsafe, as tools/setup_vision.sh makes it"""
    readme = (ROOT/'README.md').read_text()
    first = re.search(r'^bash (tools/\S+\.sh)$', readme, re.M).group(1)
    assert first == 'tools/demo.sh', first
    demo = (ROOT/first).read_text()
    assert 'bash tools/setup_vision.sh' in demo and 'exec .venv-vision/bin/ddpsafe-demo' in demo, demo
    assert 'from fastai.vision.all import *' in readme
    assert re.search(r'^pip install torch torchvision -e \.$', readme, re.M), 'the install is not one pip call'
    installs = re.findall(r'^pip install .*$', readme, re.M)
    cpu = re.fullmatch(r'pip install torch torchvision --extra-index-url (\S+/whl/cpu) -e \.', installs[0])
    assert cpu, f"the README's first install is not PyTorch's CPU builds: {installs}"
    assert f'TORCH_INDEX:-{cpu.group(1)}' in (ROOT/'tools'/'setup_vision.sh').read_text(), 'tools/demo.sh takes the CPU builds from another index'
    assert re.search(r'CPU only.*about [\d.]+ GB', readme) and re.search(r'CUDA.*about [\d.]+ GB', readme), 'each install says its size'
    assert re.search(r'pip install [^\n]*\$VISION_SPEC -e \.', (ROOT/'tools'/'setup_vision.sh').read_text())

def test_readme_links_resolve_outside_the_docs():
    "README.md is read on GitHub and PyPI: a link to a notebook (`23_benchmarks.ipynb#...`) resolves nowhere there"
    assert not re.findall(r'\]\((?!https?://|#)[^)]*\)', (ROOT/'README.md').read_text())
