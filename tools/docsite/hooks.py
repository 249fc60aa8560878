"""What MkDocs loads (`hooks:` in mkdocs.yml): headings' anchors, the nav, inline code that breaks between names only.

Kept by hand because no Markdown extension or MkDocs plugin does it: nbdev's anchors for `show_doc` headings
(`rankprocs.wait`, dunders kept) are not the toc's slugs, and MkDocs' toc takes one `slugify` for every heading; CSS
alone breaks inline code anywhere (`overflow-wrap`) or nowhere, not between names only.
"""
from __future__ import annotations
import html, re, yaml
from pathlib import Path

NAV = Path(__file__).resolve().parents[2]/'_docs_build'/'nav.yml'   # the nav, in sections (tools/docs.py writes it)

def nb_slugify(text:str, sep:str='-') -> str:
    """A heading's anchor (MkDocs' toc calls this, set by `on_config`): nbdev's for a `show_doc` name (`rankprocs.wait`,
    `trackercallback.__call__`), Python-Markdown's slug for any other heading"""
    from markdown.extensions.toc import slugify
    return text.lower() if re.fullmatch(r'[\w.]+', text) else slugify(text, sep)

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
