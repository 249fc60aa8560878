"""A processed notebook as a MkDocs page: its cells and outputs in markdown, nbdev's links made relative, anchors kept.

Kept by hand because MkDocs reads markdown, not notebooks: mkdocs-jupyter renders a notebook through nbconvert's HTML,
where "markdown things that are mkdocs specific won't work" (its author, danielfrg/mkdocs-jupyter#105): `show_doc`'s
entries, admonitions and attribute lists would not render as on the other pages. Write a callout as MkDocs'
admonition (`!!! note`): Python-Markdown renders it; Quarto's `::: {.callout-note}` is not read here (a test says so).
A figure stays Quarto's `{{< var name >}}`, which `nbdev-docs` renders from nbs/_variables.yml too; here tools/figures.py
substitutes it (mkdocs-macros would need its own syntax in the notebooks). Autorefs does not read nbdev's absolute
links (`Linker` makes them relative), nor fall back to a class's entry for a method without one (`fix_anchors`).
"""
from __future__ import annotations
import base64, functools, html, os, re, sys, markdown, yaml
from pathlib import Path
from . import ROOT, MD, DEFAULT_SECTION
from .hooks import nb_slugify
sys.path.insert(0, str(ROOT/'tools'))
from figures import substitute   # {{< var name >}}: a figure from its one source (tools/figures.py)

def fence(text:str, lang:str='', cls:str='') -> str:
    "`text` in a fenced block longer than any backtick run inside it; `cls`: CSS classes of the block"
    n = max([3] + [len(m) + 1 for m in re.findall(r'`{3,}', text)])
    info = '{ ' + ' '.join(['.' + (lang or 'text')] + ['.' + c for c in cls.split()]) + ' }' if cls else lang
    return f"{'`'*n}{info}\n{text.rstrip(chr(10))}\n{'`'*n}"

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

@functools.cache
def _markdown():
    "Python-Markdown with mkdocs.yml's extensions and the anchors `on_config` gives MkDocs' toc: headings as MkDocs makes them"
    exts = yaml.safe_load((ROOT/'mkdocs.yml').read_text(encoding='utf-8'))['markdown_extensions']
    cfgs = {k: dict(v or {}) for e in exts if isinstance(e, dict) for k, v in e.items()}
    cfgs['toc'] = cfgs.get('toc', {}) | {'slugify': nb_slugify}
    return markdown.Markdown(extensions=[e if isinstance(e, str) else next(iter(e)) for e in exts], extension_configs=cfgs)

@functools.cache
def heading_ids(md:str) -> tuple[tuple[str, str], ...]:
    "Each heading of a page's markdown as (its text, its anchor), from the toc Python-Markdown makes of it, as MkDocs will"
    m = _markdown().reset()
    m.convert(md)
    def flat(ts): return [x for t in ts for x in ((html.unescape(t['name']), t['id']), *flat(t['children']))]
    return tuple(flat(m.toc_tokens))

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
                parts.append(link(command_links(substitute(s), self.name)))
            elif c.cell_type == 'code' and d.get('include') != 'false':
                if s.strip() and d.get('echo') != 'false':
                    block, fold = fence(s.strip('\n'), c.get('metadata', {}).get('language', 'python')), d.get('code-fold')
                    if fold in ('', 'true', 'show'):
                        block = f'???{"+" if fold == "show" else ""} source "{d.get("code-summary", "Code").strip(chr(34))}"\n\n' + \
                                '\n'.join('    ' + l if l else '' for l in block.splitlines())
                    parts.append(block)
                if d.get('output') != 'false': parts += self.outputs(c, d, link)
        return '\n\n'.join(p.strip('\n') for p in parts if p.strip()) + '\n'
