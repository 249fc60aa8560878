"""What nbdev loads, configured by the docs build (`tools/docs.py`): `show_doc`'s renderer and the output processors.

nbdev's own `BasicMarkdownRenderer` shows a signature with its docments as comments; the site shows a `class`/`def`
signature as it reads in code (defaults by name: `signal.SIGTERM`, not `<Signals.SIGTERM: 15>`) and a table of the
parameters under their groups' headings (`# What to keep` in the source), which no renderer of nbdev's or fastcore's does.
fastai's console progress becomes the table fastai's docs show, and build-machine paths neutral names.
"""
from __future__ import annotations
import enum, html, inspect, os, re, sys
from pathlib import Path
from nbdev.showdoc import BasicMarkdownRenderer

ROOT = Path(__file__).resolve().parents[2]

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

def table_cell(x) -> str: return str(x).replace('|', '\\|').replace('\n', ' ')

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
        if groups.get(n, head) != head: head = groups[n]; rows.append(f'| **{table_cell(head)}** | | | |')
        star = '*' if p.kind == p.VAR_POSITIONAL else '**' if p.kind == p.VAR_KEYWORD else ''
        anno = _anno(p.annotation, sym)
        dflt = '' if p.default is p.empty else f'`{_default(p.default)}`'
        rows.append(f'| `{star}{n}` | {table_cell(anno)} | {table_cell(dflt)} | {table_cell((docs.get(n) or {}).get("docment") or "")} |')
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
        parts = ['<div class="sd-entry" markdown="1">', f'{"#"*self.title_level} {self.nm}',
                 f'```python\n{_sig(self.nm.split(".")[-1], sig, kind, sym)}\n```', self.docs or '',
                 param_table(sym, sig), f'<a class="sd-source" href="{html.escape(src)}">source</a>' if src else '', '</div>']
        return '\n\n'.join(p for p in parts if p) + '\n'
    def _src(self):
        "The link to the source in the project's repository; None for another library's (fastai's `SaveModelCallback`)"
        from nbdev.config import get_config
        from nbdev.doclinks import NbdevLookup
        src = NbdevLookup().code(self.fn)
        return src if src and src.startswith(get_config().git_url.rstrip('/') + '/') else None

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
    (`/tmp/tmpk2x9q1ab/models` -> `./models`, as the text says `models/`), a named one keeps its name; this checkout;
    a local server's free port (`127.0.0.1:PORT`), so that two builds of a page agree"""
    s = re.sub(r'''[^\s'"(]*/(?:site|dist)-packages/''', '', _tmp.sub(lambda m: m.group(1) or '.', s))
    s = re.sub(r'\b127\.0\.0\.1:\d+\b', '127.0.0.1:PORT', s)
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
    cell.outputs = outs
