"""Build the docs site into `docs/` without Quarto: nbdev's processed notebooks -> markdown -> MkDocs (material).

    python tools/docs.py            # process the notebooks, write the pages, `mkdocs build --strict`
    python tools/docs.py --serve    # the same, then `mkdocs serve` on 127.0.0.1:8000

nbdev does the notebook work (`proc_nbs`: front matter, directives, `show_doc`, doc links). Two things are configured
for the docs build only, through nbdev's user config (`$XDG_CONFIG_HOME/nbdev/config.toml`, written in `_docs_build/`):
`renderer` (`ApiRenderer`: `class`/`def` signatures with a parameter table) and `doc_procs` (`clean_outputs`,
`strip_internal`: outputs as a reader should see them). What is left here is glue: each processed notebook becomes
`_docs_build/md/<page>.md` (nbdev's page names), the nav in sections (`_docs_build/nav.yml`: the hook `on_config`
gives it to MkDocs, so `mkdocs.yml` is the one config), then `mkdocs build --strict`; and the reference as readers need it:
- the API index (`api.md`): the public names grouped by task (`API_GROUPS`, the one list of them: the build fails when
  one has no entry), everything else below, collapsed, by module;
- each module page opens with a "Use from this page" box of its public names; its other entries are labelled internal;
- MkDocs hooks (this file, `on_config` / `on_page_content`): nbdev's anchors for show_doc headings (dunders included),
  inline code that breaks between names, never inside one, and a failed build for a heading that did not render.
No MkDocs plugin does these jobs with less code (weighed in issue 58): literate-nav or awesome-nav would only read a
nav still made here from the front matter; autorefs resolves `[name][]`, not nbdev's links nor their fallback anchors.
"""
from __future__ import annotations
import argparse, base64, enum, html, importlib, inspect, os, re, shutil, subprocess, sys, time, warnings, yaml
from typing import NamedTuple
from pathlib import Path
from nbdev.showdoc import BasicMarkdownRenderer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/'tools'))
from figures import substitute   # {{< var name >}}: a figure from its one source (tools/figures.py)
BUILD, STATIC, SITE = ROOT/'_docs_build', ROOT/'docs_src', ROOT/'docs'   # staging (gitignored), extras, the site
MD, NAV = BUILD/'md', BUILD/'nav.yml'                                        # MkDocs' docs_dir, the nav
SECTIONS = ['Tutorials', 'How-to recipes', 'Explanations', 'API reference', 'Benchmarks']   # nav order
DEFAULT_SECTION = 'API reference'   # notebooks whose front matter names no `section`
NBDEV_CFG = f'doc_procs = "docs:clean_outputs docs:strip_internal"\nrenderer = "docs.ApiRenderer"\n'

NBDEV_EXPORT_ADVICE = 'Found cells containing imports and other code'   # a warning of nbdev's that the build silences

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

def _anno(a, sym=None) -> str:
    """An annotation as it reads in code, '' for none. One kept as a string (`from __future__ import annotations`, which
    `@delegates`' signatures keep as they are) is evaluated in `sym`'s module, so it reads as the others do: `bool`, not `'bool'`"""
    if a is inspect.Parameter.empty: return ''
    if isinstance(a, str):
        try: a = eval(a, dict(vars(sys.modules[sym.__module__])))
        except Exception: return a   # not evaluable here: as written in the source, unquoted
    return inspect.formatannotation(a)

def _param(p, sym=None) -> str:
    "One parameter as it reads in a signature: `*args`, `name: type = default`"
    star = '*' if p.kind == p.VAR_POSITIONAL else '**' if p.kind == p.VAR_KEYWORD else ''
    anno = f': {a}' if (a := _anno(p.annotation, sym)) else ''
    return star + p.name + anno + ('' if p.default is p.empty else (' = ' if anno else '=') + _default(p.default))

def _sig(name:str, sig, kind:str, sym=None) -> str:
    "`kind name(params)`, one parameter per line when it does not fit in 88 characters"
    ps, star = [], False   # `*` before the first keyword-only parameter, as in the source
    for n, p in (sig.parameters.items() if sig else []):
        if n == 'self': continue
        if p.kind == p.KEYWORD_ONLY and not star: ps.append('*')
        star = star or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        ps.append(_param(p, sym))
    one = f'{kind} {name}({", ".join(ps)})'
    return one if len(one) <= 88 else f'{kind} {name}(\n' + ''.join(f'    {p},\n' for p in ps) + ')'

def _cell(x) -> str: return str(x).replace('|', '\\|').replace('\n', ' ')

def param_groups(sym, names) -> dict:
    "Parameter -> its group: the comment on a line of its own above it in the signature (`# What to keep`), until the next"
    try: lines = inspect.getsource(sym.__init__ if inspect.isclass(sym) else sym).splitlines()
    except (TypeError, OSError): return {}
    groups, head = {}, None
    for line in lines:
        if m := re.match(r'\s*#\s*(.+)', line): head = m.group(1).strip()
        elif (m := re.match(r'\s*(?:def \w+\(|\*{0,2})(\w+)\b', line)) and m.group(1) in names and head: groups[m.group(1)] = head
        if re.search(r'\)\s*(?:->.*)?:\s*(?:#.*)?$', line): break   # the signature's end
    return groups

def param_table(sym, sig) -> str:
    "Markdown table of the parameters in `sig`: type, default, and the docment of each, under their groups' headings"
    if not sig or not [n for n in sig.parameters if n != 'self']: return ''
    from fastcore.docments import docments
    try: docs = docments(sym, full=True, args_kwargs=True)   # `*args`, `**kwargs` too
    except Exception: docs = {}
    rows, groups, head = ['| Parameter | Type | Default | Details |', '|---|---|---|---|'], param_groups(sym, sig.parameters), None
    for n, p in sig.parameters.items():
        if n == 'self': continue
        if groups.get(n, head) != head: head = groups[n]; rows.append(f'| **{_cell(head)}** | | | |')
        star = '*' if p.kind == p.VAR_POSITIONAL else '**' if p.kind == p.VAR_KEYWORD else ''
        anno = _anno(p.annotation, sym)
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
                 f'```python\n{_sig(self.nm.split(".")[-1], sig, kind, sym)}\n```', self.docs or '',
                 param_table(sym, sig), f'<a class="sd-source" href="{html.escape(src)}">source</a>' if src else '', '</div>']
        return '\n\n'.join(p for p in parts if p) + '\n'
    def _src(self):
        "The link to the source in the project's repository; None for another library's (fastai's `SaveModelCallback`)"
        from nbdev.config import get_config
        from nbdev.doclinks import NbdevLookup
        src = NbdevLookup().code(self.fn)
        return src if src and src.startswith(get_config().git_url.rstrip('/') + '/') else None

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

def fastai_progress(text:str) -> tuple[list[str], list[list[list[str]]], list[str]]:
    """Console progress of fastai fits: lines before the first epoch table, the tables (a header row and one row per
    epoch; one per fit that printed epochs), the other lines after them. A header without rows is dropped"""
    lines = [l for l in terminal_lines(text) if not _term_bar.match(l)]
    before, tables, after = [], [], []
    for l in lines:
        if l.split()[:1] == ['epoch']: tables.append([l.split()])
        elif tables and _epoch_row.match(l) and len(l.split()) == len(tables[-1][0]): tables[-1].append(l.split())
        else: (after if tables else before).append(l)
    tables = [t for t in tables if len(t) > 1]
    return (before, tables, after) if tables else (before + after, [], [])

def neutral_paths(s:str) -> str:
    """Build-machine paths as neutral names: a page's temporary folder is the reader's working directory
    (`/tmp/tmpk2x9q1ab/models` -> `./models`, as the text says `models/`), a named one keeps its name; this checkout"""
    s = re.sub(r'''[^\s'"(]*/(?:site|dist)-packages/''', '', _tmp.sub(lambda m: m.group(1) or '.', s))
    return s.replace(str(ROOT) + os.sep, '')

def _stream(name, lines): return {'output_type': 'stream', 'name': name, 'text': '\n'.join(lines).strip('\n') + '\n'}

def clean_outputs(cell):
    "nbdev processor: fastai's console progress as the table fastai's docs show, and no build-machine paths"
    if cell.cell_type != 'code' or not cell.get('outputs'): return
    outs = []
    for o in cell.outputs:
        if o.get('output_type') == 'stream' and ('\r' in o.text or '█' in o.text):
            before, tables, after = fastai_progress(o.text)
            outs += [_stream(o.name, before)] if any(before) else []
            outs += [{'output_type': 'display_data', 'metadata': {}, 'data': {'text/html': html_table(t)}} for t in tables]
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
    # nbdev's advice on exporting ("Found cells containing imports and other code", each with the cell's source): not
    # about the docs, and 30 of them buried the build's own messages. Quiet here and in nbdev's worker processes.
    warnings.filterwarnings('ignore', NBDEV_EXPORT_ADVICE, UserWarning)
    os.environ['PYTHONWARNINGS'] = ','.join(w for w in (os.environ.get('PYTHONWARNINGS'), f'ignore:{NBDEV_EXPORT_ADVICE}:UserWarning') if w)
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

CLI_PAGE = 'cli'   # the page of the commands: a heading `ddpsafe-ls` each (API_GROUPS links them too)

def commands() -> list[str]:
    "The commands the package installs: pyproject.toml's `[project.scripts]`"
    import tomllib
    return list(tomllib.loads((ROOT/'pyproject.toml').read_text(encoding='utf-8'))['project'].get('scripts', {}))

def command_links(md:str, page:str, cmds:list|None=None) -> str:
    """Each command in code (`ddpsafe-ls`) in `md`, outside links, headings and code blocks: a link to its own entry
    on the CLI page, not to the top of that page"""
    cmds, fence, out = set(commands() if cmds is None else cmds), None, []
    def f(m):
        t = m.group(0)
        return f'[{t}]({CLI_PAGE}.md#{t.strip("`")})' if t.startswith('`') and t.strip('`') in cmds else t
    for line in md.splitlines():
        if m := re.match(r'^\s*(`{3,}|~{3,})', line):
            fence = m.group(1) if fence is None else None if m.group(1).startswith(fence) else fence
        elif fence is None and page != CLI_PAGE and not re.match(r'^\s*#{1,6}\s', line):
            line = re.sub(r'\[[^\]\n]*\]\([^)\n]*\)|`[^`\n]+`', f, line)
        out.append(line)
    return '\n'.join(out) + ('\n' if md.endswith('\n') else '')

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

def nb_slugify(text:str, sep:str='-') -> str:
    """A heading's anchor (MkDocs' toc calls this, set by `on_config`): nbdev's for a `show_doc` name (`rankprocs.wait`,
    `trackercallback.__call__`), Python-Markdown's slug for any other heading"""
    from markdown.extensions.toc import slugify
    return text.lower() if re.fullmatch(r'[\w.]+', text) else slugify(text, sep)

def sd_anchors(md:str) -> str:
    """`show_doc` headings with the class `nb-sd`, their underscores escaped: a dunder (`__call__`) is not bold. Their
    anchors are nbdev's (`nb_slugify`), not written out: an `{ #id }` with `__` in it would be read as bold too"""
    return re.sub(r'^(#{1,6})[ \t]+([\w.]+)[ \t]*$', lambda m: f"{m.group(1)} {m.group(2).replace('_', chr(92) + '_')} {{ .nb-sd }}",
                  md, flags=re.M)

def fix_anchors(md:str, ids:dict) -> str:
    "Links to `page.md#cls.meth` where `page` has no such anchor (nbdev links every indexed name): to `#cls`, else the page"
    def f(m):
        page, anchor = m.group(1), m.group(2)
        while page in ids and anchor not in ids[page] and '.' in anchor: anchor = anchor.rsplit('.', 1)[0]
        return m.group(0) if page not in ids or m.group(2) in ids[page] else f'{page}.md' + (f'#{anchor}' if anchor in ids[page] else '')
    return re.sub(r'(?<![\w/.-])([\w.-]+)\.md#([\w.-]+)', f, md)

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
                parts.append(link(callouts(command_links(substitute(s), self.name))))
            elif c.cell_type == 'code' and d.get('include') != 'false':
                if s.strip() and d.get('echo') != 'false':
                    block, fold = fence(s.strip('\n'), c.get('metadata', {}).get('language', 'python')), d.get('code-fold')
                    if fold in ('', 'true', 'show'):
                        block = f'???{"+" if fold == "show" else ""} source "{d.get("code-summary", "Code").strip(chr(34))}"\n\n' + \
                                '\n'.join('    ' + l if l else '' for l in block.splitlines())
                    parts.append(block)
                if d.get('output') != 'false': parts += self.outputs(c, d, link)
        return '\n\n'.join(p.strip('\n') for p in parts if p.strip()) + '\n'

# ---------------------------------------------------------------------------------------------- API index
class Use(NamedTuple):
    """A public name in the API index: as a user writes it; `sym`: where its docstring is (default `name`), found in
    `<lib>/_modidx.py` in any module; `at`: `'page: heading'`, the section that documents a name without an entry of its
    own (the heading that is `heading`, else the first that contains it); `doc`: the one-liner when there is no docstring to take"""
    name: str
    sym: str|None = None
    at: str|None = None
    doc: str|None = None

# What a user calls, grouped by what they want to do: the API index's tables and each page's "Use from this page" box.
# The build fails (DocsError) when a name here has no entry in the reference, so a rename cannot leave a dead row.
API_GROUPS = {
    'Checkpoint and resume a fit': [
        Use('CheckpointCallback'), Use('CheckpointMismatch'), Use('CorruptCheckpoint'), Use('FolderInUse'),
        Use('newest_complete'), Use('checkpoint_status')],
    'Stop and requeue': [
        Use('REQUEUE_EXIT_CODE', at='storage.manifest: How a run ended',
            doc='75: what a run exits with once a preemption signal made it save and stop; a launcher requeues it'),
        Use('STOPPED_EXIT_CODE', at='storage.manifest: How a run ended',
            doc="3: what `ddpsafe-status` answers when the stop switch stopped the run; a launcher does not requeue it"),
        Use('StopRequests')],
    'fastai, made safe on import': [
        Use('Learner.save'), Use('Learner.load'), Use('Learner.export'), Use('load_learner'),
        Use('TextLearner.save_encoder', at='patches.learner: Text models',
            doc='Save the encoder to `file` in the model directory, once, on rank 0, atomically'),
        Use('TextLearner.load_encoder', at='patches.learner: Text models', doc='Load the encoder `file` on every rank'),
        Use('DataLoaders.save'), Use('load_dls'),
        Use('SaveModelCallback', at='callback.trackers: SaveModelCallback',
            doc="fastai's, with rank 0 deciding each new best and every rank loading the same best weights after fit"),
        Use('EarlyStoppingCallback, ReduceLROnPlateau', at='callback.trackers: Tracker decisions',
            doc="fastai's trackers, with rank 0's decisions (new best, stop, reduce) on every rank"),
        Use('Learner.distrib_ctx', at='patches.learner: fastai DDP on CPU',
            doc="fastai's `distrib_ctx`, on CPU too (gloo), with every wait bounded"),
        Use('Learner.snapshot')],
    'Safe files': [
        Use('atomic_save'), Use('safe_load'), Use('prepare_dir'), Use('atomic_write'),
        Use('CorruptFileError'), Use('UnsafePickleError')],
    'Decisions across ranks': [
        Use('rank'), Use('world'), Use('is_main'), Use('barrier'), Use('on_main'), Use('agree'), Use('any_rank'),
        Use('all_ranks'), Use('DistTimeout'), Use('PeerFailed'), Use('ddp_timeout')],
    'Your own state in checkpoints': [
        Use('Part'), Use('register_part'), Use('UserState'), Use('TrainingState')],
    'Sharded training': [
        Use('Learner.fsdp_ctx'), Use('full_weights'), Use('is_sharded')],
    'Test your training code on N ranks': [
        Use('run_ranks'), Use('RanksFailed'), Use('run_script'), Use('launch_ranks'), Use('synth_learner')],
    'Command line': [
        Use(f'ddpsafe-{c}', sym=f'ddpsafe_{c}', at=f'{CLI_PAGE}: `ddpsafe-{c}`') for c in ('ls', 'verify', 'status', 'export', 'demo')],
}

class Ref(NamedTuple):
    "Where a public name's entry is (`page`, `anchor`) and its one-line description"
    name: str
    page: str
    anchor: str
    doc: str
    def link(self) -> str: return f"[{', '.join(f'`{n}`' for n in self.name.split(', '))}]({self.page}.md#{self.anchor})"

def _first_line(obj) -> str: return (inspect.getdoc(obj) or '').split('\n')[0]

def modidx_syms() -> dict:
    "Every documented name of the library by its qualified name (`Learner.save`): `[(module, page, anchor)]`"
    from nbdev.config import get_config
    lib = get_config().lib_path.name
    res = {}
    for mod, syms in importlib.import_module(f'{lib}._modidx').d['syms'].items():
        for k, (url, _) in syms.items():
            page, _, anchor = url.partition('#')
            res.setdefault(k[len(mod) + 1:], []).append((mod, re.sub(r'\.html$', '', page), anchor))
    for qual, locs in list(res.items()):   # a function given to `patch_fastai` is listed by its target too (`Learner.save`)
        if (target := patched_target(locs[0][0], qual)): res.setdefault(target, []).extend(locs)
    return res

def patched_target(mod:str, name:str) -> str|None:
    "The fastai target (`Learner.save`) the function `mod.name` replaces or adds through `patch_fastai`, if it is one"
    f = getattr(importlib.import_module(mod), name, None)
    patches = getattr(sys.modules.get('ddpsafe.patches.learner'), 'fastai_patches', {})
    return next((t for (_, t), g in patches.items() if f is not None and g is f), None)

def lookup(qual:str, syms:dict):
    "The object `qual` (`Learner.save`) names, from the first module `_modidx.py` lists it under; None if none"
    for mod, _, _ in syms.get(qual, []):
        obj = importlib.import_module(mod)
        try:
            for part in qual.split('.'): obj = getattr(obj, part)
            return obj
        except AttributeError: continue
    patches = getattr(sys.modules.get('ddpsafe.patches.learner'), 'fastai_patches', {})
    return next((f for (_, t), f in patches.items() if t == qual), None)

def heading_ids(md:str) -> list[tuple[str, str]]:
    "Each heading of a page's markdown (code blocks skipped) as (its text, its anchor), as MkDocs' toc will make them"
    res, fence, seen = [], None, {}
    for line in md.splitlines():
        if m := re.match(r'^\s*(`{3,}|~{3,})', line):
            if fence is None: fence = m.group(1)
            elif m.group(1).startswith(fence): fence = None
            continue
        if fence is not None or not (m := re.match(r'^#{1,6}\s+(.*?)\s*$', line)): continue
        text, attrs = re.match(r'^(.*?)\s*(\{[^}]*\})?$', m.group(1)).groups()
        if attrs and (i := re.search(r'#([^\s}]+)', attrs)): res.append((text, i.group(1))); continue
        plain = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text).replace('`', '').replace('\\', '')
        slug = nb_slugify(html.unescape(plain))
        n = seen.get(slug, 0); seen[slug] = n + 1
        res.append((text, slug if n == 0 else f'{slug}_{n}'))
    return res

def entry_of(use:Use, qual:str, syms:dict, mds:dict) -> tuple[str, str]:
    "(page, anchor) of `use`'s entry in the reference; DocsError when there is none"
    if use.at:
        page, _, head = use.at.partition(': ')
        heads = heading_ids(mds.get(page, ''))   # the heading that is `head` (`ddpsafe-ls`), else the first containing it
        hit = next((a for t, a in heads if t == head), None) or next((a for t, a in heads if head in t), None)
        if hit is None: raise DocsError(f'API index: {use.name}: page {page!r} has no heading with {head!r} (tools/docs.py API_GROUPS)')
        return page, hit
    for _, page, anchor in syms.get(qual, []):
        ids = {a for _, a in heading_ids(mds.get(page, ''))}
        for a in (anchor, nb_slugify(qual), qual.split('.')[-1].lower()):   # nbdev's anchor, the heading's (`Learner.save`), the name's (`fsdp_ctx`)
            if a in ids: return page, a
    raise DocsError(f'API index: {use.name} has no entry in the reference ({qual}: not in _modidx.py, or its page has '
                    f'no such heading); rename it in tools/docs.py API_GROUPS')

def resolve(use:Use, syms:dict, mds:dict) -> Ref:
    "Where `use`'s entry is and what it does in one line; DocsError when the reference has no such entry"
    qual = use.sym or use.name
    page, anchor = entry_of(use, qual, syms, mds)
    obj = lookup(qual, syms)
    doc = use.doc or (_first_line(obj) if obj is not None else '')
    if not doc: raise DocsError(f'API index: {use.name}: no docstring found for {qual} and no `doc` given (tools/docs.py API_GROUPS)')
    return Ref(use.name, page, anchor, doc)

def entry_md(md:str, anchor:str) -> str:
    "The markdown under the heading `anchor` of a page's markdown `md`, up to the next heading; '' if none"
    ids, out, fence, i = [a for _, a in heading_ids(md)], None, None, -1
    for line in md.splitlines():
        if m := re.match(r'^\s*(`{3,}|~{3,})', line):
            fence = m.group(1) if fence is None else None if m.group(1).startswith(fence) else fence
        elif fence is None and re.match(r'^#{1,6}\s+\S', line):
            i += 1
            if out is not None: break
            if ids[i] == anchor: out = []
            continue
        if out is not None: out.append(line)
    return '\n'.join(out or [])

def blank_details(mds:dict, refs:dict) -> list[str]:
    "Public entries whose parameter table (`param_table`) leaves a parameter without details: `name (page): params`"
    res = []
    for r in (r for rs in refs.values() for r in rs):
        if bad := re.findall(r'^\| `([^`]+)` \|.*\|[ \t]*\|[ \t]*$', entry_md(mds.get(r.page, ''), r.anchor), re.M):
            res.append(f'{r.name} ({r.page}): {", ".join(bad)}')
    return res

def public_refs(mds:dict) -> dict[str, list[Ref]]:
    "`API_GROUPS` resolved: for each group, its names with their entries"
    syms = modidx_syms()
    return {g: [resolve(u, syms, mds) for u in uses] for g, uses in API_GROUPS.items()}

def _value_line(n:str, obj) -> str:
    "A constant as `n = value` when its repr is short and stable, else its type"
    r = repr(obj)
    return f'`{n} = {r}`' if isinstance(obj, (bool, int, float, str)) and len(r) <= 60 else f'a `{type(obj).__name__}`'

def home_module(n:str, lib:str) -> str:
    "The first module of `lib` (in `_modidx.py`'s order) that exports `n`"
    mods = importlib.import_module(f'{lib}._modidx').d['syms']
    return next((k for k in mods if n in getattr(importlib.import_module(k), '__all__', ())), lib)

def other_names(public:set) -> dict[str, list[tuple[str, str, str, str]]]:
    """Every other name the library's modules export (their `__all__`: `<lib>.all` gives the public ones only) and every
    fastai method the library patches, by module: (name, page, anchor, doc). A name is listed once, under its home"""
    from nbdev.config import get_config
    lib = get_config().lib_path.name
    syms, res, seen = modidx_syms(), {}, set()
    def add(mod, n, page, anchor, doc):
        if n not in public and n not in seen: seen.add(n); res.setdefault(mod, []).append((n, page, anchor, doc))
    for modname in importlib.import_module(f'{lib}._modidx').d['syms']:
        m = importlib.import_module(modname)
        for n in getattr(m, '__all__', ()):
            obj = getattr(m, n)
            mod, page, anchor = next(iter(syms.get(n, [])), (home_module(n, lib), '', ''))
            add(mod, n, page, anchor, _first_line(obj) if callable(obj) else _value_line(n, obj))
    for qual, locs in syms.items():   # methods patched onto fastai's classes: `Learner.fit`, `TrackerCallback.after_epoch`
        cls, _, meth = qual.rpartition('.')
        if not cls or '.' in cls or cls in syms or meth.startswith('_') and not meth.startswith('__'): continue
        mod, page, anchor = locs[0]
        add(mod, qual, page, anchor, _first_line(lookup(qual, syms)))
    order = list(importlib.import_module(f'{lib}._modidx').d['syms'])
    return dict(sorted(res.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))

def api_table(rows:list[tuple[str, str]]) -> str:
    "A table of names and one-liners, in a `div.api-table` (CSS: names unbroken; on a phone, each name above its line)"
    body = '\n'.join(f'| {n} | {_cell(d)} |' for n, d in rows)
    return f'<div class="api-table" markdown="1">\n\n| Name | What it does |\n|---|---|\n{body}\n\n</div>'

def api_index(mds:dict, refs:dict, titles:dict) -> str:
    "The API index: the public names by task, one line each; below a break, every other name by module, collapsed"
    from nbdev.config import get_config
    lib = get_config().lib_path.name
    out = ['# API index', f'What `{lib}` offers, by what you want to do: each name links to its entry in the reference.\n'
           '{ .nb-description }']
    for group, rs in refs.items():
        out += [f'## {group}', api_table([(r.link(), r.doc) for r in rs])]
    public = {n for rs in refs.values() for r in rs for n in r.name.split(', ')} | {u.sym for us in API_GROUPS.values() for u in us if u.sym}
    others = other_names(public)
    out += ['---', '## Everything else, for contributors', f"The other names `{lib}`'s modules export (each imported from its "
            f'module: `{lib}.all` gives the ones above) and the fastai methods `{lib}` patches: '
            f'internals, documented for contributors. You need none of them to use `{lib}`.',
            f'??? abstract contributors "{sum(map(len, others.values()))} names, by module"']
    for mod, rows in others.items():
        page = next((p for _, p, _, _ in rows if p), '')
        head = f'**`{mod}`**' + (f' · [{titles[page]}]({page}.md)' if page in titles else '')
        table = api_table([(f'[`{n}`]({p}.md#{a})' if p in titles else f'`{n}`', d) for n, p, a, d in rows])
        out.append('\n'.join('    ' + l for l in f'{head}\n\n{table}'.splitlines()))
    return '\n\n'.join(out) + '\n'

# ---------------------------------------------------------------------------------------------- user-facing first
def use_box(page:str, refs:dict) -> str:
    "The 'Use from this page' box of `page`: its public names, linked, one line each; '' when it has none"
    rs = [r for rs in refs.values() for r in rs if r.page == page]
    if not rs: return ''
    return '!!! abstract use-box "Use from this page"\n\n' + '\n'.join(f'    - {r.link()}: {r.doc}' for r in rs)

INTERNALS_NOTE = ('!!! abstract contributors "Internals"\n\n    The entries on this page are internals, documented for '
                  'contributors: what you call is in the [API index](api.md).')

def after_description(md:str, block:str) -> str:
    "`md` with `block` right after its title and description"
    m = re.search(r'^\{ \.nb-description \}$', md, re.M) or re.search(r'^# .*$', md, re.M)
    return md[:m.end()] + '\n\n' + block + '\n' + md[m.end():] if m else block + '\n\n' + md

def mark_internal(md:str, public:set) -> str:
    "Each `show_doc` heading whose name is not public (nor a method of a public class) gets the class `sd-internal`"
    def f(m):
        a = nb_slugify(m.group(2).replace('\\', ''))
        pub = a in public or a.rpartition('.')[0] in public
        return m.group(0) if pub else f'{m.group(1)} {{ .nb-sd .sd-internal }}'
    return re.sub(r'^(#{1,6} (\S+)) \{ \.nb-sd \}$', f, md, flags=re.M)

def user_first(name:str, md:str, refs:dict) -> str:
    "A module page as readers need it: its public names in a box first, its other entries marked internal"
    if '.nb-sd }' not in md: return md
    public = {r.anchor for rs in refs.values() for r in rs if r.page == name}
    return mark_internal(after_description(md, use_box(name, refs) or INTERNALS_NOTE), public)

# ---------------------------------------------------------------------------------------------- build
def room_title(page:str) -> str|None:
    "The nav's group of a page of a subpackage (`dist.ranks`): the subpackage's name and its docstring's first phrase (`dist: the ranks`)"
    from nbdev.config import get_config
    room, dot, _ = page.partition('.')
    if not dot or not (get_config().lib_path/room/'__init__.py').exists(): return None
    doc = (importlib.import_module(f'{get_config().lib_path.name}.{room}').__doc__ or '').split(': ', 1)[-1]
    return f"{room}: {re.split(r'[,;:.]', doc)[0].strip()}"

def write_pages(cache:Path):
    "Markdown for every processed notebook, the API index and `docs_src/`'s pages in `MD`; the nav, in sections, in `NAV`"
    if MD.exists(): shutil.rmtree(MD)
    MD.mkdir(parents=True)
    pages = sorted((Page(p) for p in cache.glob('*.ipynb') if not p.name.startswith(('_', '.'))), key=lambda p: p.nb_path.name)
    pages = [p for p in pages if not p.fm.get('skip_page')]   # `ddpsafe.core`, `.io`, `.checkpoint`: a path, no page (the redirects lead on)
    if len({p.name for p in pages}) < len(pages): raise DocsError(f'two notebooks become one page: {[p.name for p in pages]}')
    if 'index' not in {p.name for p in pages}: raise DocsError('no index.ipynb: the docs need a home page')
    from fastcore.nbio import frontmatter
    static = {f.stem: frontmatter(f.read_text(encoding='utf-8'))[0] for f in sorted(STATIC.glob('*.md'))}   # docs_src/ pages
    titles = {p.name: p.title for p in pages} | {'api': 'API index'} | {n: fm.get('title', n) for n, fm in static.items()}
    link = Linker(titles, {p.nb_path.name: p.name for p in pages})
    mds = {p.name: p.markdown(link) for p in pages}
    refs = public_refs(mds)
    if blank := blank_details(mds, refs):
        raise DocsError('API index: entries whose parameters have no details; give each a docment (a comment after it):\n  '
                        + '\n  '.join(blank))
    mds = {n: user_first(n, md, refs) for n, md in mds.items()} | {'api': api_index(mds, refs, titles)}
    ids = {n: {a for _, a in heading_ids(m)} for n, m in mds.items()}
    for name, md in mds.items(): (MD/f'{name}.md').write_text(fix_anchors(md, ids), encoding='utf-8')
    for f in cache.rglob('*'):   # images and other files the notebooks refer to (nbdev copied them from nbs/)
        rel = f.relative_to(cache)
        if f.is_file() and f.suffix not in ('.ipynb', '.yml', '.yaml', '.qmd', '.py', '.md') and not any(p.startswith(('_', '.')) for p in rel.parts):
            (MD/rel).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, MD/rel)
    nav = {s: [] for s in SECTIONS}
    for p in pages:   # the reference by room (`dist.ranks` under `dist`), bottom up as the notebooks are numbered
        if p.name == 'index': continue
        entry, group, room = {re.sub(r'`([^`]+)`', r'\1', p.title): f'{p.name}.md'}, nav.setdefault(p.section, []), room_title(p.name)
        if room and not (group and room in group[-1]): group.append({room: []})
        (group[-1][room] if room else group).append(entry)
    nav[DEFAULT_SECTION].append({'API index': 'api.md'})
    if STATIC.exists(): shutil.copytree(STATIC, MD, dirs_exist_ok=True)
    for n in static: (MD/f'{n}.md').write_text(command_links((MD/f'{n}.md').read_text(encoding='utf-8'), n), encoding='utf-8')
    for n, fm in static.items(): nav.setdefault(fm.get('section', DEFAULT_SECTION), []).append({titles[n]: f'{n}.md'})
    nav = {'Home': 'index.md'} | {s: ps for s, ps in nav.items() if ps}
    NAV.write_text(yaml.safe_dump([{k: v} for k, v in nav.items()], sort_keys=False, allow_unicode=True), encoding='utf-8')

# ---------------------------------------------------------------------------------------------- MkDocs hooks
# MkDocs loads this file as a hook module too (`hooks:` in mkdocs.yml): it calls these on each page's HTML.
_code = re.compile(r'(<pre\b[^>]*>(?:<span></span>)?)?<code\b([^>]*)>(.*?)</code>', re.S)
_names = re.compile(r'(?P<name>(?<![\w-])-*\w+(?:-+\w+)*)'   # a name, on one line: `accuracy`, `ddpsafe-ls`, `--stop-at`
                    r'|(?P<end>\.(?=[A-Za-z_])|::|[/(\[,]|=(?!=))')   # where a name ends: a line may break after these
_heading = re.compile(r'<(h[1-6])\b[^>]*>(.*?)</\1>', re.S)
_broken = re.compile(r'\*\*|\{\s*#|\.nb-sd\b')

def _break_between_names(text:str) -> str:
    "Text of inline code with a `<wbr>` where one name ends (`learn.|fit(|cbs=|...`) and hyphenated names unbroken"
    def f(m):
        if m.group('end'): return m.group(0) + '<wbr>'
        return f'<span class="nw">{m.group(0)}</span>' if '-' in m.group(0) else m.group(0)
    return _names.sub(f, text)

def code_breaks(page_html:str) -> str:
    """Inline code may break between names, never inside one (`'accurac|y'`): a `<wbr>` after `.`, `(`, `,`, `=`, `/`,
    and `ddpsafe-ls` in a `span.nw` (the CSS: no break inside). Code blocks are left alone: they scroll sideways"""
    def f(m):
        if m.group(1): return m.group(0)
        parts = re.split(r'(<[^>]+>|&\w+;|&#\d+;)', m.group(3))   # tags and entities stay as they are
        body = ''.join(p if i % 2 else _break_between_names(p) for i, p in enumerate(parts))
        return f'<code{m.group(2)}>{body}</code>'
    return _code.sub(f, page_html)

def broken_headings(page_html:str) -> list[str]:
    "Headings whose visible text shows markdown that did not render (`**call**`, `{ #anchor .nb-sd }`)"
    res = []
    for m in _heading.finditer(page_html):
        text = html.unescape(re.sub(r'<[^>]+>', '', re.sub(r'<code>.*?</code>', '', m.group(2), flags=re.S)))   # code may show `**`
        if _broken.search(text): res.append(text.strip())
    return res

def on_config(config):
    "MkDocs hook: headings get their anchors from `nb_slugify`; the nav is `NAV` (`write_pages` wrote it)"
    config['mdx_configs'].setdefault('toc', {})['slugify'] = nb_slugify
    if NAV.exists(): config['nav'] = yaml.safe_load(NAV.read_text(encoding='utf-8'))
    return config

def on_page_content(page_html, page, config, files):
    "MkDocs hook: inline code breaks between names only; the build fails on a heading that did not render"
    if bad := broken_headings(page_html):
        from mkdocs.exceptions import PluginError
        raise PluginError(f'{page.file.src_uri}: headings that did not render: {bad}')
    return code_breaks(page_html)

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
        write_pages(cache)
    except DocsError as e: sys.exit(f'[docs] ERROR: {e}')
    env = dict(os.environ, NO_MKDOCS_2_WARNING='1', SOURCE_DATE_EPOCH=os.environ.get('SOURCE_DATE_EPOCH', build_date()))
    mkdocs, conf = [sys.executable, '-m', 'mkdocs'], ROOT/'mkdocs.yml'
    if a.serve: os.execvpe(sys.executable, mkdocs + ['serve', '-f', str(conf), '-a', '127.0.0.1:8000'], env)
    if subprocess.run(mkdocs + ['build', '--strict', '--clean', '-f', str(conf)], env=env).returncode:
        sys.exit('[docs] ERROR: mkdocs build failed')
    (SITE/'.nojekyll').touch()   # GitHub Pages: serve the site as it is
    log(f'site in {SITE.relative_to(ROOT)}/ in {time.monotonic()-t0:.1f}s')

if __name__ == '__main__': main()
