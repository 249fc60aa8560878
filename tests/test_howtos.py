"""Every page that shows code (the landing page, the quick start, the guides, the how-tos) runs as printed: the code cells it shows, and nothing else, in a fresh folder (`tools/howtos.py`).
`nbdev-test` runs the hidden cells too, so it cannot see a page whose visible code uses a name only a hidden cell defines;
this does. Then the check itself, on tiny pages built here: it fails on such a page, naming the cell, and on a shell line
that fails or a page that hangs; it runs what a reader runs and skips what a reader is not shown."""
from __future__ import annotations
import importlib.util, json, re, shutil
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location('howtos', ROOT/'tools'/'howtos.py')
howtos = importlib.util.module_from_spec(spec); spec.loader.exec_module(howtos)

PAGES = howtos.code_pages()
PAGE_SECONDS = 360   # a page's own limit: a hang fails the page by name; the longest (two torchrun jobs) takes about a minute

def test_the_pages():
    "The pages checked: every how-to, the quick start and the guides; no module's page (its definitions are shown by `show_doc`)"
    stems = {p.stem for p in PAGES}
    assert {p.stem for p in howtos.how_to_pages() if any(map(bool, howtos.cells(p)))} | {'20_quickstart', '22_preemption', '23_benchmarks', '24_object_storage'} <= stems, stems
    assert not stems & {'44_dist.collectives', '69_callback.checkpoint'}, stems

def test_pages_shown_whole_run_once(tmp_path):
    "A page with no hidden cell runs here only (`nbdev-test` skips it); one with a hidden cell runs in both"
    whole, hidden = page(tmp_path, 'x = 1', 'print(x)', name='98_whole'), page(tmp_path, '#| hide\nx = 1', 'print(x)')
    rx = howtos.whole_pages_re([whole, hidden])
    assert re.search(rx, '98_whole.ipynb') and not re.search(rx, '99_tiny.ipynb') and re.search(rx, '_private.ipynb'), rx
    ran = {p.stem for p in howtos.whole_pages()}
    assert '20_quickstart' in ran and '30_best_model' not in ran and {p.stem for p in PAGES} >= ran, ran

def test_the_quick_starts_ema_alone(tmp_path):
    "The quick start's EMA cell as 0.3.0 showed it, its imports hidden: the reader's `NameError`, which the check names"
    nb = page(tmp_path, '#| hide\nfrom fastai.callback.all import *', 'class EMA(Callback):\n    order = 65', name='20_quickstart')
    r = howtos.run_page(nb, timeout=60)
    assert not r['ok'] and r['error'].startswith("cell 2, line 1: NameError: name 'Callback' is not defined"), howtos.report(r)

@pytest.mark.timeout(PAGE_SECONDS + 60)
@pytest.mark.parametrize('page', PAGES, ids=[p.stem for p in PAGES])
def test_runs_as_printed(page):
    r = howtos.run_page(page, timeout=PAGE_SECONDS)
    print(howtos.report(r))
    assert r['ok'], howtos.report(r) + '\n' + r['output'][-4000:]

# ---------------------------------------------------------------------------------------------------------------
# the check itself, on tiny pages

def page(tmp_path:Path, *cells:str, name:str='99_tiny') -> Path:
    "A how-to notebook of `cells` (code; a cell starting with '# md' is markdown)"
    front = dict(cell_type='markdown', metadata={}, source=['# A tiny page\n', '\n', '- section: How-to recipes'])
    code = lambda s: dict(cell_type='markdown', metadata={}, source=[s]) if s.startswith('# md') else \
                     dict(cell_type='code', metadata={}, outputs=[], execution_count=None, source=[s])
    nb = tmp_path/f'{name}.ipynb'
    nb.write_text(json.dumps(dict(cells=[front, *map(code, cells)], metadata={}, nbformat=4, nbformat_minor=5)))
    return nb

def test_a_name_from_a_hidden_cell_fails(tmp_path):
    "The issue's page: a hidden cell imports what the visible code uses"
    nb = page(tmp_path, '#| hide\nfrom fastcore.test import test_eq\nsynth_learner = lambda: 41', 'x = 1', 'test_eq(synth_learner() + x, 42)')
    r = howtos.run_page(nb, timeout=60)
    assert not r['ok'] and r['error'].startswith("cell 3, line 1: NameError: name 'test_eq' is not defined"), howtos.report(r)
    assert howtos.report(r).startswith('FAIL 99_tiny (')

def test_the_same_page_shown_whole_passes(tmp_path):
    nb = page(tmp_path, 'helper = 41', 'x = 1', 'print(helper + x)', '#| hide\nassert helper == 41   # a check: hidden, not run')
    r = howtos.run_page(nb, timeout=60)
    assert r['ok'] and r['output'] == '42\n' and r['cells'] == 3, howtos.report(r)

def test_ipython_syntax(tmp_path):
    "%%writefile writes, %%bash and ! lines run in the page's fresh folder; a cell shown but not run is skipped and counted"
    nb = page(tmp_path, '%%writefile train.py\nprint("trained")', '!python train.py > log\nfor i in range(1):\n    !cat log',
              '%%bash\nls\npwd > where', '#| eval: false\nraise SystemExit(3)', '# md prose', 'import os; print(sorted(os.listdir(".")))')
    r = howtos.run_page(nb, timeout=60, keep=True)
    assert r['ok'] and r['shown_only'] == 1, howtos.report(r) + r['output']
    try:
        assert r['output'].splitlines() == ['trained', 'log', 'train.py', "['log', 'train.py', 'where']"], r['output']
        assert Path((r['folder']/'where').read_text().strip()) == r['folder']   # a folder of its own, not the caller's
    finally: shutil.rmtree(r['folder'])

@pytest.mark.parametrize('cell,error', [('!exit 3', "cell 1, line 1: subprocess.CalledProcessError: Command 'exit 3' returned non-zero exit status 3."),
                                        ('%%bash\nfalse', 'CalledProcessError'),
                                        ('!echo {x}', 'IPython expands {expr} and $name'),
                                        ('%time x = 1', "line magic '%time x = 1'"),
                                        ('%%capture\nx = 1', "cell magic '%%capture'")])
def test_what_fails(tmp_path, cell, error):
    r = howtos.run_page(page(tmp_path, cell), timeout=60)
    assert not r['ok'] and error in r['error'], howtos.report(r)

def test_a_hang_fails_naming_the_page(tmp_path):
    r = howtos.run_page(page(tmp_path, 'import subprocess\nsubprocess.run("sleep 600", shell=True)'), timeout=3)
    assert not r['ok'] and howtos.report(r).startswith('FAIL 99_tiny') and 'did not finish within 3s' in r['error'], howtos.report(r)
