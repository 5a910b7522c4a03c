#!/usr/bin/env python3
"""Check the relative links and anchors of the repository's Markdown.

Usage: .ci/checklinks.py [FILE.md ...]   (default: README.md and docs/**/*.md)

Every link [text](target), reference definition [name]: target and
<img src="target"> whose target is not a URL must name a file that exists
(relative to the linking file). A #fragment must match a heading of the
target Markdown file (GitHub's anchor rules: lowercase, punctuation
dropped, spaces to hyphens, -1, -2, ... for repeats) or an explicit
id= / name= anchor in it. Headings and links inside fenced code blocks
do not count. Prints one line per broken link and exits 1 if there is any.
"""

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INLINE = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
REFDEF = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$')
SRC = re.compile(r'<(?:img|a)\b[^>]*\b(?:src|href)="([^"]+)"')
HTML_ID = re.compile(r'<[^>]*\b(?:id|name)="([^"]+)"')
HEADING = re.compile(r'^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$')


def strip_code(lines):
    """Yield (number, line) outside fenced code blocks, inline code blanked."""
    fence = None
    for n, line in enumerate(lines, 1):
        m = re.match(r'^\s{0,3}(`{3,}|~{3,})', line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
                continue
            if line.strip().startswith(fence):
                fence = None
                continue
        if fence is None:
            yield n, line


def slug(text):
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)  # links: their text
    text = re.sub(r'<[^>]+>', '', text)                     # inline HTML
    text = text.strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        found = set()
        with open(path, encoding='utf-8') as f:
            lines = f.read().split('\n')
        for _, line in strip_code(lines):
            m = HEADING.match(line)
            if m:
                s = slug(m.group(2))
                k = seen.get(s, 0)
                seen[s] = k + 1
                found.add(s if k == 0 else f'{s}-{k}')
            for a in HTML_ID.findall(line):
                found.add(a)
        _anchors[path] = found
    return _anchors[path]


def targets(line):
    code_free = re.sub(r'`[^`]*`', '', line)
    for m in INLINE.finditer(code_free):
        yield m.group(1)
    m = REFDEF.match(code_free)
    if m:
        yield m.group(1)
    for m in SRC.finditer(code_free):
        yield m.group(1)


def check(path):
    bad = []
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    for n, line in strip_code(lines):
        for t in targets(line):
            if re.match(r'^[a-z][a-z0-9+.-]*:', t, re.I):  # http:, mailto:, ...
                continue
            file, _, frag = t.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            rel = os.path.relpath(path, ROOT)
            if not os.path.exists(dest):
                bad.append(f'{rel}:{n}: {t}: no such file')
                continue
            if frag and dest.endswith('.md') and frag not in anchors(dest):
                bad.append(f'{rel}:{n}: {t}: no anchor #{frag} in {os.path.relpath(dest, ROOT)}')
    return bad


def main(argv):
    files = argv or [os.path.join(ROOT, 'README.md')] + sorted(
        glob.glob(os.path.join(ROOT, 'docs', '**', '*.md'), recursive=True))
    bad = []
    links = 0
    for path in files:
        path = os.path.abspath(path)
        bad += check(path)
        with open(path, encoding='utf-8') as f:
            links += sum(len(list(targets(l))) for _, l in strip_code(f.read().split('\n')))
    for b in bad:
        print(b)
    print(f'{len(files)} files, {links} links, {len(bad)} broken')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
