"""Build the docs site into `docs/` without Quarto: nbdev's processed notebooks -> markdown -> MkDocs (material).

    python tools/docs.py            # process the notebooks, write the pages, `mkdocs build --strict`
    python tools/docs.py --serve    # the same, then `mkdocs serve` on 127.0.0.1:8000

nbdev does the notebook work (`proc_nbs`: front matter, directives, `show_doc`, doc links). Two things are configured
for the docs build only, through nbdev's user config (`$XDG_CONFIG_HOME/nbdev/config.toml`, written in `_docs_build/`):
`renderer` (`ApiRenderer`: `class`/`def` signatures with a parameter table) and `doc_procs` (`clean_outputs`,
`strip_internal`: outputs as a reader should see them). What is left here is glue: each processed notebook becomes
`_docs_build/md/<page>.md` (nbdev's page names), an API index, the nav in sections, then `mkdocs build --strict`.
"""
from __future__ import annotations
import argparse, base64, enum, html, importlib, inspect, os, re, shutil, subprocess, sys, time
from pathlib import Path
from nbdev.showdoc import BasicMarkdownRenderer

ROOT = Path(__file__).resolve().parent.parent
BUILD, STATIC, SITE = ROOT/'_docs_build', ROOT/'docs_src', ROOT/'docs'   # staging (gitignored), extras, the site
MD = BUILD/'md'                                                              # MkDocs' docs_dir
SECTIONS = ['Tutorials', 'How-to recipes', 'Explanations', 'API reference', 'Benchmarks']   # nav order
DEFAULT_SECTION = 'API reference'   # notebooks whose front matter names no `section`
NBDEV_CFG = f'doc_procs = "docs:clean_outputs docs:strip_internal"\nrenderer = "docs.ApiRenderer"\n'

def log(*a): print('[docs]', *a, flush=True)
class DocsError(Exception): pass

# ---------------------------------------------------------------------------------------------- show_doc renderer
def _default(v) -> str:
    "A default value as it reads in code: modules, functions, classes and enum members by their names, not their reprs"
    if inspect.ismodule(v): return v.__name__
    if inspect.isfunction(v) or inspect.isbuiltin(v) or inspect.isclass(v): return v.__qualname__
    if isinstance(v, enum.Enum): return f'{type(v).__module__}.{v.name}'
    if type(v) in (tuple, list): return (f'({", ".join(map(_default, v))}{"," if len(v) == 1 else ""})' if type(v) is tuple
                                         else f'[{", ".join(map(_default, v))}]')
    return repr(v)

def _param(p) -> str:
    "One parameter as it reads in a signature: `*args`, `name: type = default`"
    star = '*' if p.kind == p.VAR_POSITIONAL else '**' if p.kind == p.VAR_KEYWORD else ''
    anno = '' if p.annotation is p.empty else f': {inspect.formatannotation(p.annotation)}'
    return star + p.name + anno + ('' if p.default is p.empty else (' = ' if anno else '=') + _default(p.default))

def _sig(name:str, sig, kind:str) -> str:
    "`kind name(params)`, one parameter per line when it does not fit in 88 characters"
    ps = [_param(p) for n, p in (sig.parameters.items() if sig else []) if n != 'self']
    one = f'{kind} {name}({", ".join(ps)})'
    return one if len(one) <= 88 else f'{kind} {name}(\n' + ''.join(f'    {p},\n' for p in ps) + ')'

def _cell(x) -> str: return str(x).replace('|', '\\|').replace('\n', ' ')

def param_table(sym, sig) -> str:
    "Markdown table of the parameters in `sig`: type, default, and the docment of each"
    if not sig or not [n for n in sig.parameters if n != 'self']: return ''
    from fastcore.docments import docments
    try: docs = docments(sym, full=True)
    except Exception: docs = {}
    rows = ['| Parameter | Type | Default | Details |', '|---|---|---|---|']
    for n, p in sig.parameters.items():
        if n == 'self': continue
        star = '*' if p.kind == p.VAR_POSITIONAL else '**' if p.kind == p.VAR_KEYWORD else ''
        anno = '' if p.annotation is p.empty else inspect.formatannotation(p.annotation)
        dflt = '' if p.default is p.empty else f'`{_default(p.default)}`'
        rows.append(f'| `{star}{n}` | {_cell(anno)} | {_cell(dflt)} | {_cell((docs.get(n) or {}).get("docment") or "")} |')
    return '\n'.join(rows)

class ApiRenderer(BasicMarkdownRenderer):
    "`show_doc` for the site: a `class`/`def` signature, the docstring, a table of the parameters from their docments"
    def _repr_markdown_(self):
        sym = self.sym
        if not callable(sym): return super()._repr_markdown_()
        sig = self.sig
        if sig is None:
            try: sig = inspect.signature(sym)
            except (TypeError, ValueError): sig = None
        kind = 'class' if inspect.isclass(sym) else 'async def' if inspect.iscoroutinefunction(sym) else 'def'
        src = self._src()
        parts = [f'<div class="sd-entry" markdown="1">', f'{"#"*self.title_level} {self.nm}',
                 f'```python\n{_sig(self.nm.split(".")[-1], sig, kind)}\n```', self.docs or '',
                 param_table(sym, sig), f'<a class="sd-source" href="{html.escape(src)}">source</a>' if src else '', '</div>']
        return '\n\n'.join(p for p in parts if p) + '\n'
    def _src(self):
        from nbdev.doclinks import NbdevLookup
        return NbdevLookup().code(self.fn)

# ---------------------------------------------------------------------------------------------- output processors
_term_bar = re.compile(r'^\s*(?:█\s*$|(?:Epoch \d+/\d+ : )?\|[█▉▊▋▌▍▎▏ -]*\|.*$)')
_ansi = re.compile(r'\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])')
_epoch_row = re.compile(r'^\d+\s')
_tmp = re.compile(r'(?:/private)?(?:/tmp|/var/tmp|/dev/shm|/var/folders/[\w/]+?/T)/(?:tmp[\w]{8}\b|([A-Za-z][\w.]*?(?:-[A-Za-z]+)*)(?:-[a-z0-9_]{8})?\b)')

def terminal_lines(text:str) -> list[str]:
    "What a terminal shows of `text`: each `\\r` overwrites its line from the start"
    res = []
    for line in text.split('\n'):
        buf = []
        for seg in line.split('\r'): buf[:len(seg)] = seg
        res.append(''.join(buf).rstrip())
    return res

def html_table(rows:list[list[str]]) -> str:
    "An HTML table like fastai's own docs show for a fit: a header row, then one row per epoch"
    th = ''.join(f'<th>{html.escape(c)}</th>' for c in rows[0])
    trs = ''.join('<tr>' + ''.join(f'<td>{html.escape(c)}</td>' for c in r) + '</tr>' for r in rows[1:])
    return f'<table class="dataframe fit-table"><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>'

def fastai_progress(text:str) -> tuple[list[str], list[list[str]], list[str]]:
    "Console progress of a fastai fit: lines before the epoch table, its rows (none without epochs), lines after"
    lines = [l for l in terminal_lines(text) if not _term_bar.match(l)]
    head = next((i for i, l in enumerate(lines) if l.split()[:1] == ['epoch']), None)
    if head is None: return lines, [], []
    cols = lines[head].split()
    rows = [i for i, l in enumerate(lines) if i > head and _epoch_row.match(l) and len(l.split()) == len(cols)]
    rest = [l for i, l in enumerate(lines) if i != head and i not in rows]
    if not rows: return rest, [], []
    n_before = sum(1 for i in range(len(lines)) if i != head and i < rows[0])
    return rest[:n_before], [cols] + [lines[i].split() for i in rows], rest[n_before:]

def neutral_paths(s:str) -> str:
    "Build-machine paths as neutral names: temporary folders (`/tmp/tmpk2x9q1ab/models` -> `run/models`), this checkout"
    s = re.sub(r'''[^\s'"(]*/(?:site|dist)-packages/''', '', _tmp.sub(lambda m: m.group(1) or 'run', s))
    return s.replace(str(ROOT) + os.sep, '')

def _stream(name, lines): return {'output_type': 'stream', 'name': name, 'text': '\n'.join(lines).strip('\n') + '\n'}

def clean_outputs(cell):
    "nbdev processor: fastai's console progress as the table fastai's docs show, and no build-machine paths"
    if cell.cell_type != 'code' or not cell.get('outputs'): return
    outs = []
    for o in cell.outputs:
        if o.get('output_type') == 'stream' and ('\r' in o.text or '█' in o.text):
            before, rows, after = fastai_progress(o.text)
            outs += [_stream(o.name, before)] if any(before) else []
            outs += [{'output_type': 'display_data', 'metadata': {}, 'data': {'text/html': html_table(rows)}}] if rows else []
            outs += [_stream(o.name, after)] if any(after) else []
        else: outs.append(o)
    for o in outs:
        if 'text' in o: o['text'] = neutral_paths(_ansi.sub('', ''.join(o['text'])))   # a stream's text may come as a list of lines
        for k in ('text/plain', 'text/markdown', 'text/html'):
            if k in o.get('data', {}): o['data'][k] = neutral_paths(''.join(o['data'][k]))
        if o.get('output_type') == 'error': o['traceback'] = [neutral_paths(_ansi.sub('', t)) for t in o.get('traceback', [])]
    cell.outputs = outs

_internal = r'`?(?:shared/)?ENV\.md`?'
def strip_internal(cell):
    "nbdev processor: drop mentions of the project's internal notes (`shared/ENV.md`), which readers cannot open"
    if cell.cell_type != 'markdown' or 'ENV.md' not in cell.source: return
    s = re.sub(rf'\s*\((?:see )?{_internal}[^()]*\)', '', cell.source)
    cell.source = re.sub(rf'[;,]\s*see {_internal}', '', s)

# ---------------------------------------------------------------------------------------------- process
def process_notebooks() -> Path:
    "nbdev's doc processing (`proc_nbs`, as `nbdev-proc-nbs` minus Quarto) of `nbs/` into `_proc/`, with our config"
    from nbdev.config import get_config
    from nbdev.serve import proc_nbs
    xdg = BUILD/'xdg'
    (xdg/'nbdev').mkdir(parents=True, exist_ok=True)
    (xdg/'nbdev'/'config.toml').write_text(NBDEV_CFG)
    os.environ['XDG_CONFIG_HOME'] = str(xdg)   # nbdev reads `renderer` and `doc_procs` from there; workers inherit it
    try: cache = proc_nbs(force=True, n_workers=min(os.cpu_count() or 1, 4))
    except Exception as e: raise DocsError(f'nbdev could not process the notebooks:\n{e}') from None
    srcs = sorted(p.name for p in get_config().nbs_path.glob('*.ipynb') if not p.name.startswith(('_', '.')))
    if missing := [n for n in srcs if not (cache/n).exists()]: raise DocsError(f'nbdev produced no output for {missing}')
    return cache

# ---------------------------------------------------------------------------------------------- markdown
def fence(text:str, lang:str='', cls:str='') -> str:
    "`text` in a fenced block longer than any backtick run inside it; `cls`: CSS classes of the block"
    n = max([3] + [len(m) + 1 for m in re.findall(r'`{3,}', text)])
    info = '{ ' + ' '.join(['.' + (lang or 'text')] + ['.' + c for c in cls.split()]) + ' }' if cls else lang
    return f"{'`'*n}{info}\n{text.rstrip(chr(10))}\n{'`'*n}"

_callouts = dict(note='note', tip='tip', warning='warning', caution='danger', important='important')
def callouts(md:str) -> str:
    "Quarto callouts (`::: {.callout-note}`) as MkDocs admonitions; other fenced divs lose their fences"
    out, stack = [], []   # stack: True for an open callout (its body gets indented), False for a dropped div
    for line in md.splitlines():
        m = re.match(r'^\s*:::+\s*(\{.*\}|\S+)?\s*$', line)
        if m and m.group(1):
            c, title = re.search(r'\.callout-(\w+)', m.group(1)), re.search(r'title="([^"]*)"', m.group(1))
            if c: out.append('    '*sum(stack) + f'!!! {_callouts.get(c.group(1), "note")}' + (f' "{title.group(1)}"' if title else ''))
            stack.append(bool(c)); continue
        if m and stack: stack.pop(); out.append(''); continue
        out.append('    '*sum(stack) + line if line.strip() else '')
    return '\n'.join(out)

class Linker:
    "Links to the published docs (nbdev writes them) and to notebooks, as relative links between the pages built here"
    def __init__(self, pages:dict, nb2page:dict):
        from nbdev.config import get_config
        cfg = get_config()
        self.prefix = f"{(cfg.doc_host or '').rstrip('/')}/{(cfg.doc_baseurl or '').strip('/')}".rstrip('/') + '/'
        self.pages, self.nb2page = pages, nb2page
    def target(self, url:str) -> str|None:
        "The relative `.md` link for `url`, or None to leave it alone"
        path, _, frag = url.partition('#')
        if path.startswith(self.prefix): path = path[len(self.prefix):]
        elif re.match(r'^[a-z][\w+.-]*:', url) or url.startswith(('/', '#')) or not path: return None
        stem, suf = os.path.splitext(Path(path).name)
        page = self.nb2page.get(stem + suf, stem) if suf == '.ipynb' else re.sub(r'\.html$', '', stem)
        return f'{page}.md' + (f'#{frag}' if frag else '') if suf in ('.html', '.ipynb', '.md') and page in self.pages else None
    def unlink(self, md:str) -> str:
        "Markdown links that leave the site and the project's repository, as their text (the docs link nowhere else)"
        from nbdev.config import get_config
        keep = (self.prefix, get_config().git_url.rstrip('/') + '/')
        return re.sub(r'\[([^\]]*)\]\((https?://[^)\s]+)\)', lambda m: m.group(0) if m.group(2).startswith(keep) else m.group(1), md)
    def __call__(self, md:str) -> str:
        md = self.unlink(md)
        def sub(m): return m.group(0) if (t := self.target(m.group(2))) is None else f'{m.group(1)}{t}{m.group(3)}'
        md = re.sub(r'(\]\()(\S+?)((?:\s+"[^"]*")?\))', sub, md)
        return re.sub(r'''(\b(?:href|src)=["'])([^"']+)(["'])''', sub, md)

def sd_anchors(md:str) -> str:
    "Give `show_doc` headings nbdev's anchors (`rankprocs.wait`), which MkDocs' slugs would otherwise change"
    return re.sub(r'^(#{1,6})[ \t]+([\w.]+)[ \t]*$', lambda m: f'{m.group(1)} {m.group(2)} {{ #{m.group(2).lower()} .nb-sd }}', md, flags=re.M)

def fix_anchors(md:str, ids:dict) -> str:
    "Links to `page.md#cls.meth` where `page` has no such anchor (nbdev links every indexed name): to `#cls`, else the page"
    def f(m):
        page, anchor = m.group(1), m.group(2)
        while page in ids and anchor not in ids[page] and '.' in anchor: anchor = anchor.rsplit('.', 1)[0]
        return m.group(0) if page not in ids or m.group(2) in ids[page] else f'{page}.md' + (f'#{anchor}' if anchor in ids[page] else '')
    return re.sub(r'(?<![\w/.-])([\w-]+)\.md#([\w.]+)', f, md)

class Page:
    "One processed notebook as a markdown page; title, description and section from nbdev's front matter"
    def __init__(self, nb_path:Path):
        from fastcore.nbio import read_nb, nb_frontmatter
        self.nb_path, self.nb = nb_path, read_nb(nb_path)
        self.fm = nb_frontmatter(self.nb)
        self.name = re.sub(r'\.html$', '', self.fm.get('output-file') or nb_path.stem + '.html')
        self.title, self.desc = str(self.fm.get('title') or nb_path.stem), self.fm.get('description')
        self.section, self.n_img = self.fm.get('section', DEFAULT_SECTION), 0

    def image(self, data:str, ext:str) -> str:
        "Write an output image next to the page; its relative path"
        self.n_img += 1
        rel = f'{self.name}_files/figure-{self.n_img}.{ext}'
        (MD/rel).parent.mkdir(parents=True, exist_ok=True)
        (MD/rel).write_bytes(data.encode() if ext == 'svg' else base64.b64decode(data))
        return rel

    def outputs(self, cell, d:dict, link) -> list[str]:
        "Markdown for a cell's outputs: text in fenced blocks, markdown as is, HTML, images with the cell's `fig-alt`"
        parts, outs = [], []
        for o in cell.get('outputs', []):   # consecutive prints to one stream: one block
            same = o.get('output_type') == 'stream' and outs and outs[-1].get('name') == o.get('name')
            if same: outs[-1] = dict(outs[-1], text=outs[-1]['text'] + o['text'])
            else: outs.append(o)
        for o in outs:
            t, data = o.get('output_type'), o.get('data', {})
            if t == 'stream': parts.append(fence(o['text'], 'text', f'nb-out nb-{o["name"]}'))
            elif t == 'error': parts.append(fence('\n'.join(o.get('traceback') or []), 'text', 'nb-out nb-error'))
            elif 'text/markdown' in data: parts.append(link(sd_anchors(data['text/markdown'])))
            elif 'text/html' in data: parts.append(f'<div class="nb-output" markdown="0">\n{data["text/html"].strip()}\n</div>')
            elif img := next((k for k in ('image/svg+xml', 'image/png', 'image/jpeg', 'image/gif') if k in data), None):
                alt = (d.get('fig-alt') or d.get('fig-cap') or '').strip('"\'').replace(']', '')
                parts.append(f'![{alt}]({self.image(data[img], img.split("/")[1].replace("svg+xml", "svg"))}){{ .nb-image }}')
            elif 'text/plain' in data: parts.append(fence(data['text/plain'], 'text', 'nb-out'))
        return parts

    def markdown(self, link) -> str:
        from nbdev.processors import insert_warning
        parts = [f'# {self.title}'] + ([f'{self.desc}\n{{ .nb-description }}'] if self.desc else [])
        for c in self.nb.cells:
            d, s = c.directives, c.source
            if c.cell_type == 'code': c.remove_directives(); s = c.source
            if c.cell_type == 'markdown' and c.source.strip() != insert_warning.content:
                for name, att in (c.get('attachments') or {}).items():
                    k = next(iter(att))
                    s = s.replace(f'attachment:{name}', self.image(att[k], k.split('/')[-1].replace('svg+xml', 'svg')))
                parts.append(link(callouts(s)))
            elif c.cell_type == 'code' and d.get('include') != 'false':
                if s.strip() and d.get('echo') != 'false':
                    block, fold = fence(s.strip('\n'), c.get('metadata', {}).get('language', 'python')), d.get('code-fold')
                    if fold in ('', 'true', 'show'):
                        block = f'???{"+" if fold == "show" else ""} source "{d.get("code-summary", "Code").strip(chr(34))}"\n\n' + \
                                '\n'.join('    ' + l if l else '' for l in block.splitlines())
                    parts.append(block)
                if d.get('output') != 'false': parts += self.outputs(c, d, link)
        return '\n\n'.join(p.strip('\n') for p in parts if p.strip()) + '\n'

def _value_line(n:str, obj) -> str:
    "A constant as `n = value` when its repr is short and stable, else its type"
    r = repr(obj)
    return f'`{n} = {r}`' if isinstance(obj, (bool, int, float, str)) and len(r) <= 60 else f'a `{type(obj).__name__}`'

def api_index(pages:dict) -> str:
    "The API index: every name of `<lib>.all`, what it does in one line, and where its entry is"
    from nbdev.config import get_config
    lib = get_config().lib_path.name
    syms, m = importlib.import_module(f'{lib}._modidx').d['syms'], importlib.import_module(f'{lib}.all')
    rows = ['| Name | What it does |', '|---|---|']
    for n in m.__all__:
        obj = getattr(m, n)
        mod = getattr(obj, '__module__', None) if callable(obj) else next((k for k in syms if f'{k}.{n}' in syms[k]), None)
        page, _, anchor = (syms.get(mod or '', {}).get(f'{mod}.{n}') or ('',))[0].partition('#')
        page = re.sub(r'\.html$', '', page)
        doc = (inspect.getdoc(obj) or '').split('\n')[0] if callable(obj) else _value_line(n, obj)
        rows.append(f'| [`{n}`]({page}.md#{anchor}) | {_cell(doc)} |' if page in pages else f'| `{n}` | {_cell(doc)} |')
    return f'# API index\n\nEvery public name of `{lib}.all`, with a link to its entry in the API reference.\n{{ .nb-description }}\n\n' + '\n'.join(rows) + '\n'

# ---------------------------------------------------------------------------------------------- build
def write_pages(cache:Path) -> dict:
    "Markdown for every processed notebook, the API index and `docs_src/`'s pages in `MD`; the nav, in sections"
    if MD.exists(): shutil.rmtree(MD)
    MD.mkdir(parents=True)
    pages = sorted((Page(p) for p in cache.glob('*.ipynb') if not p.name.startswith(('_', '.'))), key=lambda p: p.nb_path.name)
    if len({p.name for p in pages}) < len(pages): raise DocsError(f'two notebooks become one page: {[p.name for p in pages]}')
    if 'index' not in {p.name for p in pages}: raise DocsError('no index.ipynb: the docs need a home page')
    from fastcore.nbio import frontmatter
    static = {f.stem: frontmatter(f.read_text(encoding='utf-8'))[0] for f in sorted(STATIC.glob('*.md'))}   # docs_src/ pages
    titles = {p.name: p.title for p in pages} | {'api': 'API index'} | {n: fm.get('title', n) for n, fm in static.items()}
    link = Linker(titles, {p.nb_path.name: p.name for p in pages})
    mds = {p.name: p.markdown(link) for p in pages} | {'api': api_index(titles)}
    ids = {n: set(re.findall(r'\{ #([^\s}]+)[ }]', m)) for n, m in mds.items()}
    for name, md in mds.items(): (MD/f'{name}.md').write_text(fix_anchors(md, ids), encoding='utf-8')
    for f in cache.rglob('*'):   # images and other files the notebooks refer to (nbdev copied them from nbs/)
        rel = f.relative_to(cache)
        if f.is_file() and f.suffix not in ('.ipynb', '.yml', '.yaml', '.qmd', '.py', '.md') and not any(p.startswith(('_', '.')) for p in rel.parts):
            (MD/rel).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, MD/rel)
    nav = {s: [] for s in SECTIONS}
    for p in pages:
        if p.name != 'index': nav.setdefault(p.section, []).append({re.sub(r'`([^`]+)`', r'\1', p.title): f'{p.name}.md'})
    nav[DEFAULT_SECTION].append({'API index': 'api.md'})
    if STATIC.exists(): shutil.copytree(STATIC, MD, dirs_exist_ok=True)
    for n, fm in static.items(): nav.setdefault(fm.get('section', DEFAULT_SECTION), []).append({titles[n]: f'{n}.md'})
    return {'Home': 'index.md'} | {s: ps for s, ps in nav.items() if ps}

def write_config(nav:dict) -> Path:
    "`_docs_build/mkdocs.yml`: the root `mkdocs.yml` plus the nav"
    import yaml
    cfg = {'INHERIT': '../mkdocs.yml', 'docs_dir': 'md', 'site_dir': '../docs', 'nav': [{k: v} for k, v in nav.items()]}
    p = BUILD/'mkdocs.yml'
    p.write_text('# Generated by tools/docs.py: edit ../mkdocs.yml instead\n' + yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return p

def build_date() -> str:
    "The time of the last commit that touched the notebooks, for reproducible sitemap dates"
    r = subprocess.run(['git', 'log', '-1', '--format=%ct', '--', 'nbs'], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() or str(int(time.time()))

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--no-proc', action='store_true', help='reuse _proc/ as it is (faster; stale if notebooks changed)')
    ap.add_argument('--serve', action='store_true', help='then run `mkdocs serve` on 127.0.0.1:8000')
    a = ap.parse_args()
    os.chdir(ROOT); sys.path.insert(0, str(ROOT))
    t0 = time.monotonic()
    try:
        cache = ROOT/'_proc' if a.no_proc and (ROOT/'_proc').exists() else process_notebooks()
        log(f'writing pages into {MD.relative_to(ROOT)}/ ...')
        conf = write_config(write_pages(cache))
    except DocsError as e: sys.exit(f'[docs] ERROR: {e}')
    env = dict(os.environ, NO_MKDOCS_2_WARNING='1', SOURCE_DATE_EPOCH=os.environ.get('SOURCE_DATE_EPOCH', build_date()))
    mkdocs = [sys.executable, '-m', 'mkdocs']
    if a.serve: os.execvpe(sys.executable, mkdocs + ['serve', '-f', str(conf), '-a', '127.0.0.1:8000'], env)
    if subprocess.run(mkdocs + ['build', '--strict', '--clean', '-f', str(conf)], env=env).returncode:
        sys.exit('[docs] ERROR: mkdocs build failed')
    (SITE/'.nojekyll').touch()   # GitHub Pages: serve the site as it is
    log(f'site in {SITE.relative_to(ROOT)}/ in {time.monotonic()-t0:.1f}s')

if __name__ == '__main__': main()
