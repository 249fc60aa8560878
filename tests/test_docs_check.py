"""The docs checker (tools/browser_check.py) fails on what a reader should not see: tiny pages built here, each with
one problem (a fastai progress bar, a build-machine path, an API entry without its parameter table, an image without
alt text, a page wider than a phone), loaded in headless Chromium the way the checker loads the site; and a clean page
passes. Skipped only when no Chromium is installed."""
from __future__ import annotations
import sys
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]/'tools'))
import browser_check as bc

PNG = ('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')
ENTRY = '''<div class="sd-entry"><h3 id="fit">fit</h3><pre><code>def fit(n_epoch, lr=None)</code></pre>
<p>Fit the model</p>{table}</div>'''
TABLE = '<table><tr><th>Parameter</th></tr><tr><td>n_epoch</td></tr><tr><td>lr</td></tr></table>'
CLEAN = f'''<p>Training ran for three epochs and saved to <code>run/checkpoints</code>.</p>
{ENTRY.format(table=TABLE)}
<div class="sd-entry"><h3 id="rank">rank</h3><pre><code>def rank()</code></pre><p>This process's rank</p></div>
<p><img src="data:image/png;base64,{PNG}" alt="Bar chart of the time each save method blocks training" style="width:200px"></p>'''

def page(body:str) -> str:
    return f'<!doctype html><html><head><meta name="viewport" content="width=device-width"></head><body><article>{body}</article></body></html>'

@pytest.fixture(scope='module')
def site(tmp_path_factory):
    exe = bc.chromium_path()
    if exe is None: pytest.skip('no Chromium installed (apt-get install -y chromium)')
    root = tmp_path_factory.mktemp('site')
    pages = dict(clean=CLEAN,
                 progress=CLEAN + '<pre><code>Epoch 1/3 : |████████----| 66.67% [4/6 00:00&lt;00:00]</code></pre>',
                 path=CLEAN + '<pre><code>ddpsafe: resumed from /tmp/tmpk2x9q1ab/checkpoints/step-00000012</code></pre>',
                 no_table=CLEAN + ENTRY.format(table=''),
                 bad_alt=CLEAN + f'<p><img src="data:image/png;base64,{PNG}" alt="output"></p>',
                 wide=CLEAN + '<div style="width:900px">a table drawn wider than a phone</div>')
    for name, body in pages.items(): (root/f'{name}.html').write_text(page(body), encoding='utf-8')
    srv = bc.Server(root, '/')
    yield exe, srv.base
    srv.close()

def problems(site, name:str, width:int=390) -> list[str]:
    "Everything the checker finds on fixture page `name` at `width` px"
    exe, base = site
    r, dom, _ = bc.read_page(exe, base + f'{name}.html', width)
    return bc.text_problems(''.join(bc.parse(dom).main)) + bc.reader_problems(r, width)

def test_clean_page_passes(site): assert problems(site, 'clean', 1280) == [] and problems(site, 'clean', 390) == []

@pytest.mark.parametrize('name,expect', [('progress', 'progress bar'), ('path', 'build-machine path'),
                                         ('no_table', 'no parameter table'), ('bad_alt', 'no alt text'),
                                         ('wide', 'wider than the window')])
def test_checker_fails(site, name, expect):
    probs = problems(site, name)
    assert any(expect in p for p in probs), probs

def test_text_rules():
    assert bc.text_problems('saved to run/models/m.pth') == []
    assert bc.text_problems('see shared/ENV.md for the numbers')
    assert bc.text_problems(r'C:\Users\me\ckpt') and bc.text_problems('/home/runner/work/x')
    assert bc.takes_params('class CheckpointCallback(\n    path=\'checkpoints\',\n)') and not bc.takes_params('def rank()')
