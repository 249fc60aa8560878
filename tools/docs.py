"""Build the docs site into `docs/` without Quarto: nbdev's processed notebooks -> markdown -> MkDocs (material).

    python tools/docs.py            # process the notebooks, write the pages, `mkdocs build --strict`
    python tools/docs.py --serve    # the same, then `mkdocs serve` on 127.0.0.1:8000

Steps:
1. nbdev's notebook processing (what `nbdev-proc-nbs` does, minus its Quarto install attempt and the `nbs/*.yml`
   files it writes): `_proc/*.ipynb`, with directives applied and `show_doc` rendered as markdown.
2. Each processed notebook becomes `_docs_build/md/<page>.md`, `<page>` being nbdev's own page name (`core` for
   `core.html`), so the links nbdev writes (`https://ddpsafe.github.io/ddpsafe/core.html#rank`) become relative links.
3. `api.md`: every public name, with its signature, docstring and parameter docs, and a link to its page.
4. `_docs_build/mkdocs.yml` (`INHERIT: ../mkdocs.yml` plus the nav, in notebook order), then `mkdocs build --strict`.
"""
from __future__ import annotations
import argparse, ast, base64, importlib, inspect, json, os, re, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT/'_docs_build'   # staging: generated markdown and config (gitignored)
MD = BUILD/'md'              # MkDocs' docs_dir
STATIC = ROOT/'docs_src'     # static extras copied into the site (CSS)
SITE = ROOT/'docs'           # the built site (committed)
API_PAGE = 'api'

def log(*a): print('[docs]', *a, flush=True)

class DocsError(Exception): pass

# ---------------------------------------------------------------------------------------------------------- process
def process_notebooks(force:bool=True) -> Path:
    "Run nbdev's doc processors over `nbs/` into `_proc/`; fail if a notebook did not come out"
    from nbdev.config import get_config
    from nbdev.serve import proc_nbs
    cfg = get_config()
    # `nbdev-proc-nbs` also writes nbs/nbdev.yml, nbs/_quarto.yml, nbs/sidebar.yml (Quarto's config) and tries to
    # install Quarto with sudo when it is missing; the processing itself is `proc_nbs`, which needs neither.
    risky = doc_run_cells()
    try: cache = proc_nbs(force=force, n_workers=min(os.cpu_count() or 1, 4))
    except Exception as e:
        raise DocsError(f'nbdev could not process the notebooks (nor would `nbdev-proc-nbs` or `nbdev-docs`):\n{e}\n\n'
            'To render show_doc, nbdev runs the exported cells and every cell with an import in it (even one inside '
            'a function), and no other cell: such a cell fails when it uses names from cells that are not run. '
            'Keep imports in cells of their own (or at the top of the notebook). Cells that import and do more:\n  '
            + '\n  '.join(risky)) from None
    if risky: log('note: nbdev runs these cells while processing (they import, then do more):\n  ' + '\n  '.join(risky))
    srcs = sorted(p.name for p in cfg.nbs_path.glob('*.ipynb') if not p.name.startswith(('_', '.')))
    missing = [n for n in srcs if not (cache/n).exists()]
    if missing: raise DocsError(f'nbdev processing produced no output for {missing}: see the errors above')
    return cache

def doc_run_cells() -> list[str]:
    "Cells nbdev's doc processing runs (imports, even inside a function) that do more than import and define"
    from nbdev.config import get_config
    res, safe = [], (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for f in sorted(get_config().nbs_path.glob('*.ipynb')):
        if f.name.startswith(('_', '.')): continue
        for i, c in enumerate(json.loads(f.read_text(encoding='utf-8'))['cells']):
            s = src(c.get('source'))
            if c['cell_type'] != 'code' or 'nbdev_export()' in s: continue
            d, code = directives(s)
            if {'export', 'exports', 'exporti', 'exec_doc'} & d.keys() or str(d.get('eval')).lower() == 'false': continue
            try: tree = ast.parse(code)
            except SyntaxError: continue   # magics: nbdev does not run them either
            if not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)): continue
            if all(isinstance(n, safe) for n in tree.body): continue
            res.append(f'{f.name} cell {i}: ' + next((l for l in code.splitlines() if l.strip()), '')[:90])
    return res

# ---------------------------------------------------------------------------------------------------------- helpers
_ansi = re.compile(r'\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])')
def src(x) -> str: return ''.join(x) if isinstance(x, list) else (x or '')

def fence(text:str, lang:str='', cls:str='') -> str:
    "`text` in a fenced block longer than any backtick run inside it; `cls`: CSS classes of the block"
    n = max([3] + [len(m) + 1 for m in re.findall(r'`{3,}', text)])
    info = '{ ' + ' '.join(['.' + (lang or 'text')] + ['.' + c for c in cls.split()]) + ' }' if cls else lang
    return f"{'`'*n}{info}\n{text.rstrip(chr(10))}\n{'`'*n}"

def front_matter(cell) -> dict:
    import yaml
    s = src(cell['source']).strip()
    if not s.startswith('---'): return {}
    body = s[3:].rsplit('---', 1)[0]
    try: return yaml.safe_load(body) or {}
    except yaml.YAMLError: return {}

_re_dir = re.compile(r'^\s*#\|\s*(.*?)\s*$')
def directives(source:str) -> tuple[dict, str]:
    "Quarto/nbdev `#|` directives at the top of a code cell, and the code without them"
    lines, d = source.splitlines(), {}
    i = 0
    while i < len(lines) and (m := _re_dir.match(lines[i])):
        k, _, v = m.group(1).replace(':', ' ', 1).partition(' ')
        d[k.strip().lower()] = v.strip().strip('"\'')
        i += 1
    return d, '\n'.join(lines[i:]).strip('\n')

def _false(d, k): return str(d.get(k)).lower() in ('false', 'no', '0')

# Quarto callouts -> MkDocs admonitions; other fenced divs (`::: {.x}` ... `:::`) lose their fences
_callouts = dict(note='note', tip='tip', warning='warning', caution='danger', important='important')
def callouts(md:str) -> str:
    out, stack = [], []   # stack: True for an open callout (its body gets indented), False for a dropped div
    for line in md.splitlines():
        m = re.match(r'^\s*:::+\s*(\{.*\}|\S+)?\s*$', line)
        if m and m.group(1):
            c = re.search(r'\.callout-(\w+)', m.group(1))
            if c:
                title = re.search(r'title="([^"]*)"', m.group(1))
                kind = _callouts.get(c.group(1), 'note')
                out.append('    '*sum(stack) + f'!!! {kind}' + (f' "{title.group(1)}"' if title else ''))
                stack.append(True)
            else: stack.append(False)
            continue
        if m and stack:
            stack.pop(); out.append(''); continue
        ind = '    '*sum(stack)
        if stack and stack[-1] and out and out[-1].lstrip().startswith('!!! ') and '"' not in out[-1] \
           and (h := re.match(r'^#{1,6}\s+(.*)$', line)):
            out[-1] += f' "{h.group(1).strip()}"'; continue    # `## Title` first line of a callout: its title
        out.append(ind + line if line.strip() else '')
    return '\n'.join(out)

# ---------------------------------------------------------------------------------------------------------- links
class Linker:
    "Rewrites links to the published docs and to notebooks into relative links between the pages built here"
    def __init__(self, pages:dict, nb2page:dict):
        from nbdev.config import get_config
        cfg = get_config()
        self.prefix = (cfg.doc_host or '').rstrip('/') + '/' + (cfg.doc_baseurl or '').strip('/')
        self.prefix = self.prefix.rstrip('/') + '/'
        self.pages, self.nb2page = pages, nb2page   # page name -> title; notebook file name -> page name

    def target(self, url:str) -> str|None:
        "The relative `.md` link for `url`, or None to leave it alone"
        path, hash_, frag = url.partition('#')
        if url.startswith(self.prefix) or url.startswith(self.prefix.replace('https://', 'http://')):
            path = path.split('/', 3)[-1][len(self.prefix.split('/', 3)[-1]):] if '://' in path else path
        elif re.match(r'^[a-z][\w+.-]*:', url) or url.startswith(('/', '#')) or not path: return None
        path = Path(path).name if path else 'index.html'
        for suf in ('.html.md', '.html', '.ipynb', '.md', '.qmd'):
            if path.endswith(suf):
                stem = path[:-len(suf)]
                page = self.nb2page.get(stem + '.ipynb', stem) if suf == '.ipynb' else stem
                if page in self.pages: return f'{page}.md' + (hash_ + frag if frag else '')
        return None

    def __call__(self, md:str) -> str:
        def sub_md(m):
            t = self.target(m.group(2))
            return m.group(0) if t is None else f'{m.group(1)}{t}{m.group(3)}'
        md = re.sub(r'(\]\()(\S+?)((?:\s+"[^"]*")?\))', sub_md, md)
        return re.sub(r'''(\b(?:href|src)=["'])([^"']+)(["'])''', sub_md, md)

def sd_anchors(md:str) -> str:
    "Give `show_doc` headings nbdev's anchors (`rankprocs.wait`), which MkDocs' slugs would otherwise change"
    def f(m):
        name = m.group(2).strip()
        if not re.fullmatch(r'[\w.]+', name): return m.group(0)
        return f'{m.group(1)} {name} {{ #{name.lower()} .nb-sd }}'
    return re.sub(r'^(#{1,6})[ \t]+(\S.*?)[ \t]*$', f, md, flags=re.M)

def fix_anchors(md:str, mds:dict) -> str:
    "Links to `page.md#cls.meth` where `page` documents no `cls.meth` (nbdev links every indexed name): to `#cls`, else the page"
    ids = {n: set(re.findall(r'\{ #([^\s}]+)[ }]', m)) for n, m in mds.items()}
    def f(m):
        page, anchor = m.group(1), m.group(2)
        if page not in ids or anchor in ids[page] or '.' not in anchor: return m.group(0)
        while '.' in anchor:
            anchor = anchor.rsplit('.', 1)[0]
            if anchor in ids[page]: return f'{page}.md#{anchor}'
        return f'{page}.md'
    return re.sub(r'(?<![\w/.-])([\w-]+)\.md#([\w.]+)', f, md)

# ---------------------------------------------------------------------------------------------------------- convert
class Page:
    "One processed notebook, as a markdown page"
    def __init__(self, nb_path:Path):
        self.nb_path, self.nb = nb_path, json.loads(nb_path.read_text(encoding='utf-8'))
        cells = self.nb['cells']
        self.fm = front_matter(cells[0]) if cells and cells[0]['cell_type'] == 'raw' else {}
        out = self.fm.get('output-file') or nb_path.stem + '.html'
        self.name = re.sub(r'\.html$', '', out)
        heading = next((m.group(1) for c in cells if c['cell_type'] == 'markdown'
                        for m in [re.search(r'^#\s+(.+?)\s*$', src(c['source']), re.M)] if m), None)
        self.title = str(self.fm.get('title') or heading or nb_path.stem)
        self.desc = self.fm.get('description')
        self.n_img = 0

    def image(self, data:str, ext:str) -> str:
        "Write an output image next to the page; its relative path"
        self.n_img += 1
        rel = f'{self.name}_files/output-{self.n_img}.{ext}'
        (MD/rel).parent.mkdir(parents=True, exist_ok=True)
        raw = data.encode() if ext == 'svg' else base64.b64decode(data)
        (MD/rel).write_bytes(raw)
        return rel

    def outputs(self, outs:list, asis:bool, link) -> list[str]:
        parts, streams, last = [], [], None
        def flush():
            if streams: parts.append(fence(''.join(streams), 'text', f'nb-out nb-{last}')); streams.clear()
        for o in outs:
            t = o.get('output_type')
            if t == 'stream':
                if streams and o.get('name') != last: flush()    # stdout and stderr in blocks of their own
                streams.append(_ansi.sub('', src(o.get('text')))); last = o.get('name'); continue
            flush()
            if t == 'error':
                parts.append(fence(_ansi.sub('', '\n'.join(o.get('traceback') or [f"{o.get('ename')}: {o.get('evalue')}"])), 'text', 'nb-out nb-error'))
            elif t in ('execute_result', 'display_data'):
                d = o.get('data', {})
                if 'text/markdown' in d:
                    md = src(d['text/markdown'])
                    parts.append(link(sd_anchors(md) if asis else md))
                elif 'text/html' in d:
                    parts.append(f'<div class="nb-output" markdown="0">\n{src(d["text/html"]).strip()}\n</div>')
                elif any(k in d for k in ('image/svg+xml', 'image/png', 'image/jpeg', 'image/gif')):
                    k = next(k for k in ('image/svg+xml', 'image/png', 'image/jpeg', 'image/gif') if k in d)
                    ext = {'image/svg+xml': 'svg', 'image/png': 'png', 'image/jpeg': 'jpg', 'image/gif': 'gif'}[k]
                    rel = self.image(src(d[k]), ext)
                    parts.append(f'![output]({rel}){{ .nb-image }}')
                elif 'text/plain' in d:
                    parts.append(fence(_ansi.sub('', src(d['text/plain'])), 'text', 'nb-out'))
        flush()
        return parts

    def markdown(self, link) -> str:
        parts = [f'# {self.title}']
        if self.desc: parts.append(f'{self.desc}\n{{ .nb-description }}')
        for c in self.nb['cells']:
            s = src(c.get('source'))
            if c['cell_type'] == 'markdown':
                if re.fullmatch(r'\s*<!-- WARNING: THIS FILE WAS AUTOGENERATED! DO NOT EDIT! -->\s*', s): continue
                for name, att in (c.get('attachments') or {}).items():
                    k = next(iter(att))
                    rel = self.image(att[k], k.split('/')[-1].replace('svg+xml', 'svg').replace('jpeg', 'jpg'))
                    s = s.replace(f'attachment:{name}', rel)
                parts.append(link(callouts(s)))
            elif c['cell_type'] == 'code':
                d, code = directives(s)
                if _false(d, 'include'): continue
                if code.strip() and not _false(d, 'echo'):
                    block = fence(code, c.get('metadata', {}).get('language', 'python'))
                    fold = str(d.get('code-fold')).lower()
                    if fold in ('true', 'show'):
                        summary = d.get('code-summary') or 'Code'
                        block = f'???{"+" if fold == "show" else ""} source "{summary}"\n\n' + \
                                '\n'.join('    ' + l if l else '' for l in block.splitlines())
                    parts.append(block)
                if not _false(d, 'output'):
                    parts += self.outputs(c.get('outputs', []), str(d.get('output')).lower() == 'asis' or bool(c.get('has_sd')), link)
        return '\n\n'.join(p.strip('\n') for p in parts if p.strip()) + '\n'

# ---------------------------------------------------------------------------------------------------------- API page
def public_names(lib:str) -> tuple[str, list[tuple[str, str]]]:
    "How the public API is defined, and its (module, name) pairs: `<lib>.all`'s re-exports, else every module's `__all__`"
    lib_path = ROOT/lib
    allf = lib_path/'all.py'
    if allf.exists():
        m = importlib.import_module(f'{lib}.all')
        tree, pairs = ast.parse(allf.read_text()), []
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                mod = importlib.import_module(f'{lib}.{node.module}')
                names = [a.name for a in node.names]
                if names == ['*']: names = list(getattr(mod, '__all__', [n for n in dir(mod) if not n.startswith('_')]))
                pairs += [(mod.__name__, n) for n in names if not n.startswith('_')]
        if getattr(m, '__all__', None):   # nbdev writes `__all__ = []` in a module that only re-exports
            origin = dict((n, md) for md, n in pairs)
            pairs = [(origin.get(n, m.__name__), n) for n in m.__all__]
        return f'`{lib}.all`', pairs
    pairs = []
    for f in sorted(lib_path.glob('*.py')):
        if f.name.startswith('_') or f.stem == 'all': continue
        mod = importlib.import_module(f'{lib}.{f.stem}')
        pairs += [(mod.__name__, n) for n in getattr(mod, '__all__', [])]
    return f"each module's `__all__`", pairs

def _fix_source_line(md:str, obj) -> str:
    "show_doc outside a notebook may write `#LNone`: put the real line number in"
    if '#LNone' not in md: return md
    try: line = inspect.getsourcelines(inspect.unwrap(obj))[1]
    except (TypeError, OSError): return md.replace('#LNone', '')
    return md.replace('#LNone', f'#L{line}')

def api_page(pages:dict, link) -> str:
    from nbdev.showdoc import show_doc
    from nbdev.doclinks import NbdevLookup
    from nbdev.config import get_config
    cfg = get_config()
    lib = cfg.lib_path.name
    syms = importlib.import_module(f'{lib}._modidx').d['syms']
    how, pairs = public_names(lib)
    lookup = NbdevLookup()
    out = ['# API reference',
           f'Every public name of ddpsafe ({how}): its signature, what it does, what each parameter means, '
           'and the page that explains it. Patches that ddpsafe adds to other libraries\' classes are listed '
           'under the module that adds them.\n{ .nb-description }']
    by_mod = {}
    for mod, n in pairs: by_mod.setdefault(mod, []).append(n)
    seen = set()
    def where(mod, qual):
        "The page and anchor nbdev recorded for `mod.qual`"
        ent = syms.get(mod, {}).get(f'{mod}.{qual}')
        if not ent: return None
        page, _, anchor = ent[0].partition('#')
        page = re.sub(r'\.html$', '', page)
        return (page, anchor) if page in pages else None
    def entry(obj, mod, qual, level):
        if qual in seen: return []
        seen.add(qual)
        loc = where(mod, qual)
        if callable(obj):
            md = show_doc(obj, name=qual, title_level=level)._repr_markdown_()
            md = _fix_source_line(md, obj)
        else:   # a constant: its value when short and plain, else its type (a repr may hold addresses)
            simple = isinstance(obj, (int, float, str, bytes, bool, type(None))) and len(repr(obj)) <= 200
            md = f"{'#'*level} {qual}\n\n" + fence(f'{qual} = {obj!r}' if simple else f'{qual}: {type(obj).__name__}', 'python')
        md = sd_anchors(lookup.linkify(md))
        if loc: md += f'\n\n<small>Explained in [{pages[loc[0]]}]({loc[0]}.md#{loc[1]})</small>'
        elif page_of(mod): md += f'\n\n<small>Explained in [{pages[page_of(mod)]}]({page_of(mod)}.md)</small>'
        return [link(md)]
    def page_of(mod):
        "The page of the notebook that exports `mod`"
        return next((p for k in syms.get(mod, {}) if (loc := where(mod, k[len(mod)+1:])) for p in [loc[0]]), None)
    order = list(pages)
    for mod, names in sorted(by_mod.items(), key=lambda kv: (order.index(page_of(kv[0])) if page_of(kv[0]) else len(order), kv[0])):
        m = importlib.import_module(mod)
        page = page_of(mod)
        head = f'## `{mod}`'
        out.append(head + (f'\n\n[{pages[page]}]({page}.md)' if page else ''))
        if m.__doc__: out.append(link(lookup.linkify(m.__doc__.split('\n\nDocs:')[0].strip())))
        for n in names:
            if not hasattr(m, n): raise DocsError(f'{mod}.__all__ names {n!r}, which {mod} does not define')
            obj = getattr(m, n)
            out += entry(obj, mod, n, 3)
            if inspect.isclass(obj):   # its public methods that nbdev indexed (and so documented)
                for key in syms.get(mod, {}):
                    meth = key[len(mod)+1:]
                    if meth.startswith(n + '.') and not meth.split('.')[-1].startswith('_') and meth.count('.') == 1:
                        sub = getattr(obj, meth.split('.')[-1], None)
                        if sub is not None: out += entry(sub, mod, meth, 4)
        # @patch-ed methods: `Class.meth` entries of this module whose class is not one of its public names
        patches = [k[len(mod)+1:] for k in syms.get(mod, {}) if k[len(mod)+1:].count('.') == 1]
        patches = [q for q in patches if q.split('.')[0] not in names and not any(p.startswith('_') for p in q.split('.'))
                   and getattr(getattr(m, q.split('.')[0], None), '__module__', None) != mod]   # not a class of `mod` itself
        if patches:
            out.append(f'### Patches\n\nMethods `{mod}` adds to (or replaces in) other classes:')
            for q in patches:
                cls = getattr(m, q.split('.')[0], None)
                sub = getattr(cls, q.split('.')[1], None) if cls is not None else None
                if sub is None: log(f'warning: {mod}.{q} is in the module index but not reachable from {mod}; skipped')
                else: out += entry(sub, mod, q, 4)
    return '\n\n'.join(out) + '\n'

# ---------------------------------------------------------------------------------------------------------- build
def write_pages(cache:Path) -> list[tuple[str, str]]:
    "Markdown for every processed notebook (plus the API page) in `MD`; the nav, in notebook order"
    if MD.exists(): shutil.rmtree(MD)
    MD.mkdir(parents=True)
    nbs = [p for p in cache.glob('*.ipynb') if not p.name.startswith(('_', '.'))]
    nbs.sort(key=lambda p: ('0' if p.stem == 'index' else '1') + p.name)
    pages = [Page(p) for p in nbs]
    names = {}
    for p in pages:
        if p.name in names: raise DocsError(f'{p.nb_path.name} and {names[p.name]} both become {p.name}.html')
        names[p.name] = p.nb_path.name
    if API_PAGE in names: raise DocsError(f'{names[API_PAGE]} becomes {API_PAGE}.html, the name of the API reference page')
    if 'index' not in names: raise DocsError('no index.ipynb: the docs need a home page')
    titles = {p.name: p.title for p in pages}
    titles[API_PAGE] = 'API reference'
    link = Linker(titles, {p.nb_path.name: p.name for p in pages})
    mds = {p.name: p.markdown(link) for p in pages}
    mds[API_PAGE] = api_page(titles, link)
    for name, md in mds.items(): (MD/f'{name}.md').write_text(fix_anchors(md, mds), encoding='utf-8')
    for f in cache.rglob('*'):   # images and other files the notebooks refer to (nbdev copied them from nbs/)
        rel = f.relative_to(cache)
        if f.is_file() and f.suffix not in ('.ipynb', '.yml', '.yaml', '.qmd', '.py', '.md') \
           and not any(p.startswith(('_', '.')) for p in rel.parts):
            (MD/rel).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, MD/rel)
    if STATIC.exists(): shutil.copytree(STATIC, MD, dirs_exist_ok=True)
    return [(p.title, f'{p.name}.md') for p in pages] + [('API reference', f'{API_PAGE}.md')]

def write_config(nav:list) -> Path:
    "`_docs_build/mkdocs.yml`: the root `mkdocs.yml` plus the nav of the notebooks present"
    import yaml
    cfg = {'INHERIT': '../mkdocs.yml', 'docs_dir': 'md', 'site_dir': '../docs',
           'nav': [{re.sub(r'`([^`]+)`', r'\1', t): f} for t, f in nav]}   # nav titles are plain text
    p = BUILD/'mkdocs.yml'
    p.write_text('# Generated by tools/docs.py: edit ../mkdocs.yml instead\n' + yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return p

def build_date() -> str:
    "The time of the last commit that touched the notebooks, for reproducible sitemap dates"
    try:
        r = subprocess.run(['git', 'log', '-1', '--format=%ct', '--', 'nbs'], cwd=ROOT, capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip(): return r.stdout.strip()
    except OSError: pass
    return str(int(time.time()))

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--no-proc', action='store_true', help='reuse _proc/ as it is (faster; stale if notebooks changed)')
    ap.add_argument('--serve', action='store_true', help='then run `mkdocs serve` on 127.0.0.1:8000')
    a = ap.parse_args()
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    t0 = time.monotonic()
    try:
        if a.no_proc and (ROOT/'_proc').exists(): cache = ROOT/'_proc'
        else:
            log('processing notebooks (nbdev) into _proc/ ...')
            cache = process_notebooks()
        t1 = time.monotonic()
        log(f'writing pages into {MD.relative_to(ROOT)}/ ...')
        nav = write_pages(cache)
        conf = write_config(nav)
    except DocsError as e:
        sys.exit(f'[docs] ERROR: {e}')
    t2 = time.monotonic()
    env = dict(os.environ, NO_MKDOCS_2_WARNING='1', SOURCE_DATE_EPOCH=os.environ.get('SOURCE_DATE_EPOCH', build_date()))
    mkdocs = [sys.executable, '-m', 'mkdocs']
    if a.serve: os.execvpe(sys.executable, mkdocs + ['serve', '-f', str(conf), '-a', '127.0.0.1:8000'], env)
    log(f'mkdocs build --strict -f {conf.relative_to(ROOT)}')
    r = subprocess.run(mkdocs + ['build', '--strict', '--clean', '-f', str(conf)], env=env)
    if r.returncode: sys.exit(f'[docs] ERROR: mkdocs build failed (exit {r.returncode})')
    (SITE/'.nojekyll').touch()   # GitHub Pages: serve the site as it is
    t3 = time.monotonic()
    log(f'{len(nav)} pages in {SITE.relative_to(ROOT)}/: processing {t1-t0:.1f}s, pages {t2-t1:.1f}s, '
        f'mkdocs {t3-t2:.1f}s, total {t3-t0:.1f}s')

if __name__ == '__main__': main()
