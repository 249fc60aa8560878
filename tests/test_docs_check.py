"""The docs checker (tools/browser_check.py) fails on what a reader should not see: tiny pages built here, each with
one problem (a fastai progress bar, a build-machine path, an API entry without its parameter table, an image without
alt text, a page wider than a phone, a heading that did not render, code broken inside a name; on a phone a copy button over
code, a tutorial's end-of-line comment cut at the edge, `ddpsafe-ls`'s best mark out of sight), loaded in headless Chromium the way the checker
loads the site; and a clean page passes. Skipped only when no Chromium is installed. Then the docs build's own rules
(tools/docsite/): show_doc headings render (dunders included), the API index fails on a name with no entry, fastai's
progress becomes one table per fit."""
from __future__ import annotations
import re, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'tools'))
import browser_check as bc

PNG = ('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')
ENTRY = '''<div class="sd-entry"><h3 id="fit">fit</h3><pre><code>def fit(n_epoch, lr=None)</code></pre>
<p>Fit the model</p>{table}</div>'''
TABLE = '<table><tr><th>Parameter</th></tr><tr><td>n_epoch</td></tr><tr><td>lr</td></tr></table>'
CLEAN = f'''<p>Training ran for three epochs and saved to <code>run/checkpoints</code>.</p>
{ENTRY.format(table=TABLE)}
<div class="sd-entry"><h3 id="rank">rank</h3><pre><code>def rank()</code></pre><p>This process's rank</p></div>
<p><img src="data:image/png;base64,{PNG}" alt="Bar chart of the time each save method blocks training" style="width:200px"></p>
<pre style="overflow-x:auto"><code style="white-space:pre">learn.fit_one_cycle(4, cbs=[CheckpointCallback(every_epoch=1, keep=3), SaveModelCallback(monitor='accuracy')])</code></pre>
<p style="width:150px">Between names only: <code>learn.<wbr>fit(<wbr>cbs=<wbr>SaveModelCallback(<wbr>monitor=<wbr>'accuracy'))</code> and
<code><span style="white-space:nowrap">ddpsafe-status</span> checkpoints</code>.</p>
<p style="width:120px"><code><span style="white-space:nowrap">ddpsafe-export</span> <span style="white-space:nowrap">--best</span></code></p>'''

CODE = 'display:block;white-space:pre;overflow-x:auto'   # a code block that scrolls sideways, as the site's do

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
                 wide=CLEAN + '<div style="width:900px">a table drawn wider than a phone</div>',
                 broken=CLEAN + '<pre style="width:150px"><code style="white-space:pre-wrap;overflow-wrap:anywhere">learn.fit(1, cbs=SaveModelCallback(monitor=\'accuracy\', comp=np.greater, min_delta=0.01, fname=\'best_model_by_accuracy\'))</code></pre>',
                 broken_inline=CLEAN + '<p style="width:150px">Ask <code style="overflow-wrap:anywhere">SaveModelCallback(monitor=\'accuracy_of_the_validation_set_every_epoch\')</code></p>',
                 heading=CLEAN + '<h3 id="x">TrackerCallback.<strong>call</strong> { #trackercallback.<strong>call</strong> .nb-sd }</h3>',
                 button=CLEAN + f'<pre style="position:relative"><nav class="md-code__nav" style="position:absolute;top:0;right:0;'
                                f'width:60px;height:30px;background:#eee"></nav><code style="{CODE}">{"x = 1 + 2 " * 12}</code></pre>',
                 comment=CLEAN + f'<pre><code style="{CODE}">learn = synth_learner(path=\'.\')                  # your Learner, made up</code></pre>',
                 ls_best=CLEAN + f'<div class="nb-out"><pre><code style="{CODE}">checkpoint\nstep-00000018{" " * 60}best  complete</code></pre></div>')
    for name, body in pages.items(): (root/f'{name}.html').write_text(page(body), encoding='utf-8')
    srv = bc.Server(root, '/')
    yield exe, srv.base
    srv.close()

def problems(site, name:str, width:int=390, story:bool=True) -> list[str]:
    "Everything the checker finds on fixture page `name` at `width` px, read as a tutorial's page (`story`) or not"
    exe, base = site
    r, dom, _ = bc.read_page(exe, base + f'{name}.html', width)
    return bc.text_problems(''.join(bc.parse(dom).main)) + bc.reader_problems(r, width, story)

def test_clean_page_passes(site): assert problems(site, 'clean', 1280) == [] and problems(site, 'clean', 390) == []

def test_phone_rules_where_they_apply(site):
    "An end-of-line comment and a far best mark are a tutorial's problem on a phone only; a button over code, any page's"
    assert problems(site, 'comment', 390, story=False) == [] and problems(site, 'comment', 1280) == []
    assert problems(site, 'ls_best', 390, story=False) == [] and problems(site, 'button', 1280) == []
    assert any('copy button covers code' in p for p in problems(site, 'button', 390, story=False))

@pytest.mark.parametrize('name,expect', [('progress', 'progress bar'), ('path', 'build-machine path'),
                                         ('no_table', 'no parameter table'), ('bad_alt', 'no alt text'),
                                         ('wide', 'wider than the window'), ('heading', 'did not render'),
                                         ('broken', 'breaks inside a name'), ('broken_inline', 'breaks inside a name'),
                                         ('button', 'copy button covers code'), ('comment', 'end-of-line comment is cut'),
                                         ('ls_best', '"best" mark is out of sight')])
def test_checker_fails(site, name, expect):
    probs = problems(site, name)
    assert any(expect in p for p in probs), probs

def test_text_rules():
    assert bc.text_problems('saved to run/models/m.pth') == []
    assert bc.text_problems('see shared/ENV.md for the numbers')
    assert bc.text_problems(r'C:\Users\me\ckpt') and bc.text_problems('/home/runner/work/x')
    assert bc.text_problems('resumed from /dev/shm/ddpsafe-root-3f2a/step-8')                         # a run's own folder
    assert bc.text_problems('by default /dev/shm/ddpsafe-USER-KEY, where KEY is') == []          # the placeholders the docs write
    assert bc.text_problems('remove /dev/shm/ddpsafe-* there; the bytes of /dev/shm/.../step-N/') == []
    assert bc.takes_params('class CheckpointCallback(\n    path=\'checkpoints\',\n)') and not bc.takes_params('def rank()')

def test_noise_rules():
    out = lambda *o: bc.noise_problems({'outputs': list(o)})
    assert out('ddpsafe: resumed from run/checkpoints/step-00000009', '[1, 2, 3]') == []
    assert 'a Python warning' in out('core.py:72: UserWarning: You are shadowing an attribute (sig)')[0]
    assert 'epoch table header' in out('epoch     train_loss  valid_loss  time\nddpsafe: resumed')[0]
    assert 'recorder values' in out('[[28.844810485839844, 21.931251525878906],\n [28.53, 21.08]]')[0]

# ---------------------------------------------------------------------------------------------- tools/docsite/
@pytest.fixture(scope='module')
def docs():
    "The docs build's parts (tools/docsite/), by module: `docs.hooks.nb_slugify`"
    from types import SimpleNamespace
    from docsite import api_index, hooks, pages, showdoc
    return SimpleNamespace(api_index=api_index, hooks=hooks, pages=pages, showdoc=showdoc)

def test_dunder_heading_renders(docs):
    import markdown
    md = markdown.Markdown(extensions=['toc', 'attr_list'], extension_configs={'toc': {'slugify': docs.hooks.nb_slugify}})
    out = md.convert(docs.pages.sd_anchors('### TrackerCallback.__call__\n\n### CSVLogger._flush_lines\n\n## Text models: `save_encoder`'))
    assert '<h3 class="nb-sd" id="trackercallback.__call__">TrackerCallback.__call__</h3>' in out, out
    assert 'id="csvlogger._flush_lines">CSVLogger._flush_lines<' in out and 'id="text-models-save_encoder"' in out
    assert docs.hooks.broken_headings(out) == []
    assert docs.hooks.broken_headings('<h3>TrackerCallback.<strong>call</strong> { #trackercallback.</h3>')
    assert docs.hooks.broken_headings('<h2>Passing <code>**kwargs</code></h2>') == []

def test_heading_ids(docs):
    md = docs.pages.sd_anchors('### Learner.save') + '\n\n```python\n# a comment, not a heading\n```\n\n## How a run ended\n\n## How a run ended'
    assert [a for _, a in docs.pages.heading_ids(md)] == ['learner.save', 'how-a-run-ended', 'how-a-run-ended_1']

def test_api_index_fails_on_a_dead_row(docs):
    mds = {'io': docs.pages.sd_anchors('# Files\n\n### atomic_save'), 'manifest': '# Folders\n\n## How a run ended'}
    syms = {'atomic_save': [('ddpsafe.files.safe', 'io', 'atomic_save')]}
    assert docs.api_index.resolve(docs.api_index.Use('atomic_save'), syms, mds).anchor == 'atomic_save'
    assert docs.api_index.resolve(docs.api_index.Use('X', at='manifest: How a run', doc='x'), syms, mds).anchor == 'how-a-run-ended'
    for use in (docs.api_index.Use('atomic_save_renamed', doc='x'), docs.api_index.Use('X', at='manifest: How it ended', doc='x')):
        with pytest.raises(docs.api_index.DocsError): docs.api_index.resolve(use, syms, mds)
    with pytest.raises(docs.api_index.DocsError): docs.api_index.resolve(docs.api_index.Use('atomic_save'), syms, {'io': '# Files'})   # entry gone

def test_one_table_per_fit(docs):
    head = 'epoch     train_loss  valid_loss  time'
    before, tables, after = docs.showdoc.fastai_progress(f'start\n{head}\n0 1.0 2.0 00:00\nresumed\n{head}\n{head}\n1 1.5 2.5 00:00\n')
    assert before == ['start'] and [len(t) for t in tables] == [2, 2] and after[0] == 'resumed'
    assert docs.showdoc.fastai_progress(f'{head}\nnothing trained\n') == ([ 'nothing trained', ''], [], [])

def test_command_links(docs):
    md = ('Run `ddpsafe-status checkpoints`, then `ddpsafe-status`; [`ddpsafe-ls`](cli.md) is linked already.\n'
          '### `ddpsafe-ls`\n\n```sh\n`ddpsafe-ls`\n```\n')
    out = docs.pages.command_links(md, 'quickstart', ['ddpsafe-ls', 'ddpsafe-status'])
    assert out.splitlines()[0] == ('Run `ddpsafe-status checkpoints`, then [`ddpsafe-status`](cli.md#ddpsafe-status); '
                                   '[`ddpsafe-ls`](cli.md) is linked already.'), out
    assert out.splitlines()[1:] == md.splitlines()[1:]             # headings and code blocks as they were
    assert docs.pages.command_links(md, docs.pages.CLI_PAGE, ['ddpsafe-status']) == md   # the CLI page does not link to itself
    assert 'ddpsafe-demo' in docs.pages.commands()

def test_api_index_prefers_the_exact_heading(docs):
    mds = {'cli': '# Command line: `ddpsafe-ls`, `ddpsafe-status`\n\n## The commands\n\n### `ddpsafe-ls`\n\n### `ddpsafe-status`'}
    assert docs.api_index.resolve(docs.api_index.Use('ddpsafe-ls', at='cli: `ddpsafe-ls`', doc='x'), {}, mds).anchor == 'ddpsafe-ls'

def test_blank_details(docs):
    "A public name's parameter with no docment fails the build: its table would leave the details blank"
    def f(a,   # The a
          **kwargs): "F"
    def g(b): "G"
    ai = docs.api_index
    assert ai.undocumented(f) == ('kwargs',) and ai.undocumented(g) == ('b',)
    refs = {'G': [ai.Ref('f', 'p', 'f', 'F', ai.undocumented(f)), ai.Ref('h', 'p', 'h', 'H')]}
    assert ai.blank_details(refs) == ['f (p): kwargs']

def test_no_quarto_callouts():
    "The pages are MkDocs': a callout is written as an admonition (`!!! note`), which renders; Quarto's `:::` would show as text"
    import json
    for nb in sorted((ROOT/'nbs').glob('*.ipynb')):
        for c in json.loads(nb.read_text())['cells']:
            if c['cell_type'] == 'markdown': assert not re.search(r'^\s*:::', ''.join(c['source']), re.M), f'{nb.name}: a Quarto callout'

def test_annotations_read_as_code(docs):
    import inspect, pathlib
    def f(file, n=2, *, flag=True, other=None): pass
    f.__annotations__ = dict(file='Path', n='int', flag='bool', other='NotAName')   # as `from __future__ import annotations` keeps them
    f.__module__ = 'pathlib'   # where `Path` is a name
    assert docs.showdoc._sig('f', inspect.signature(f), 'def', f) == 'def f(file: pathlib.Path, n: int = 2, *, flag: bool = True, other: NotAName = None)'

def test_code_breaks(docs):
    out = docs.hooks.code_breaks('<p><code>learn.fit(cbs=SaveModelCallback(monitor=&#39;accuracy&#39;))</code> <code>ddpsafe-ls --stop-at</code></p>'
                           '<pre><span></span><code>learn.fit(1)</code></pre>')
    assert '<code>learn.<wbr>fit(<wbr>cbs=<wbr>SaveModelCallback(<wbr>monitor=<wbr>&#39;accuracy&#39;))</code>' in out, out
    assert '<span class="nw">ddpsafe-ls</span> <span class="nw">--stop-at</span>' in out, out
    assert out.endswith('<pre><span></span><code>learn.fit(1)</code></pre>')   # code blocks: as they are, they scroll

def test_param_groups_head_the_table(docs, tmp_path):
    "A comment on a line of its own in a signature heads a group of the parameters table, until the next; a docment stays a docment"
    import inspect, textwrap, types
    mod = types.ModuleType('grouped'); sys.modules['grouped'] = mod
    src = textwrap.dedent('''
        def f(a,      # first
              # Where
              b=1,    # second
              c=2,    # third
              # How
              d=3):   # fourth
            "A grouped signature"
        def g(a, b=1): "No group"
        ''')
    path = tmp_path/'grouped.py'   # inspect reads the source from a file
    try:
        path.write_text(src); exec(compile(src, str(path), 'exec'), vars(mod))
        assert docs.showdoc.param_groups(mod.f, inspect.signature(mod.f).parameters) == dict(b='Where', c='Where', d='How')
        rows = docs.showdoc.param_table(mod.f, inspect.signature(mod.f)).splitlines()
        assert [r.split('|')[1].strip() for r in rows[2:]] == ['`a`', '**Where**', '`b`', '`c`', '**How**', '`d`'], rows
        assert rows[4].endswith('| second |') and docs.showdoc.param_groups(mod.g, inspect.signature(mod.g).parameters) == {}
    finally: path.unlink(missing_ok=True); del sys.modules['grouped']
