#!/usr/bin/env python3
"""Turn extracted Debian documentation packages into a JSONL text corpus.

Stdlib only. Deterministic: packages are visited in the fixed order of
PACKAGES below, files inside a package in sorted path order, and every kept
file becomes exactly one {"text": ...} line. Writing stops before the first
document that would push the output past --max-bytes.

Usage:
  make_corpus.py --src /tmp/corpus/src --out /tmp/corpus/corpus_200mb.jsonl \
      --max-bytes 200000000 --manifest /tmp/corpus/MANIFEST.tsv

/tmp/corpus/src/<package>/ must hold the unpacked .deb (dpkg-deb -x).
"""
import argparse
import gzip
import json
import os
import re
import sys
from html.parser import HTMLParser

# (package, kind, path regex that a file's path relative to the package root
#  must match after stripping a trailing .gz). kind: "text" or "markup".
PACKAGES = [
    ("linux-doc-6.1", "text",
     r"^usr/share/doc/linux-doc-6\.1/Documentation/.*(\.rst|\.txt|\.yaml|/[^./]+)$"),
    ("python3.11-doc", "text", r"^usr/share/doc/python3\.11/html/_sources/.*\.rst\.txt$"),
    ("perl-doc", "text", r"^usr/share/perl/.*\.pod$"),
    ("git-doc", "text", r"^usr/share/doc/git-doc/.*\.txt$"),
    ("nodejs-doc", "text", r"^usr/share/doc/nodejs/.*\.md$"),
    ("debian-handbook", "markup", r"^usr/share/doc/debian-handbook/html/.*\.html$"),
    ("gnome-user-docs", "markup", r"^usr/share/help/.*\.page$"),
    ("libreoffice-help-en-us", "markup", r"\.html$"),
    ("libreoffice-help-de", "markup", r"\.html$"),
    ("libreoffice-help-fr", "markup", r"\.html$"),
    ("libreoffice-help-es", "markup", r"\.html$"),
    ("libreoffice-help-ja", "markup", r"\.html$"),
    ("python-django-doc", "markup", r"\.html$"),
    ("postgresql-doc-15", "markup", r"\.html$"),
    ("sqlite3-doc", "markup", r"\.html$"),
    ("erlang-doc", "markup", r"\.html$"),
    ("gimp-help-en", "markup", r"\.html$"),
    ("rust-doc", "markup", r"\.html$"),
]

BLOCK = {
    "p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6",
    "tr", "table", "pre", "section", "article", "dd", "dt", "dl", "blockquote",
    "hr", "td", "th", "title", "caption", "figcaption",
    # Mallard (.page) elements
    "page", "list", "item", "steps", "terms", "note", "screen", "example",
}
SKIP = {"script", "style", "head", "nav", "footer", "info", "noscript", "svg"}


class _Text(HTMLParser):
    """HTML/XML to plain text: drop script/style/nav, newline at block tags."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        if tag in SKIP:
            self.skip += 1
        elif tag in ("pre", "screen"):
            self.pre += 1
        if tag in BLOCK and not self.skip:
            self.out.append("\n")

    def handle_startendtag(self, tag, attrs):
        if tag in BLOCK and not self.skip:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in ("pre", "screen"):
            self.pre = max(0, self.pre - 1)
        if tag in BLOCK and not self.skip:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip:
            return
        if self.pre:
            self.out.append(data)
        else:
            self.out.append(re.sub(r"[ \t\r\n\f\v]+", " ", data))


def markup_to_text(s: str) -> str:
    p = _Text()
    p.feed(s)
    p.close()
    text = "".join(p.out)
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n[ \t]+(?=\S)", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return data


def iter_docs(src_root: str, pkg: str, kind: str, pattern: str):
    root = os.path.join(src_root, pkg)
    rx = re.compile(pattern)
    rels = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for fn in filenames:
            full = os.path.join(dirpath, fn)
            if os.path.islink(full):
                continue
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            key = rel[:-3] if rel.endswith(".gz") else rel
            if rx.search(key):
                rels.append(rel)
    for rel in sorted(rels):
        try:
            raw = read_file(os.path.join(root, rel))
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        if b"\x00" in raw:
            continue
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if kind == "markup":
            s = markup_to_text(s)
        if not s.strip():
            continue
        if s.startswith("Redirecting to") and len(s) < 300:
            continue  # rustdoc redirect stubs: generated, not prose
        yield rel, s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-bytes", type=int, default=200_000_000)
    ap.add_argument("--manifest", default=None)
    a = ap.parse_args()

    total = 0
    ndocs = 0
    rows = []
    full = False
    with open(a.out + ".tmp", "wb") as out:
        for pkg, kind, pattern in PACKAGES:
            if full:
                break
            if not os.path.isdir(os.path.join(a.src, pkg)):
                print(f"warning: {pkg} not unpacked, skipped", file=sys.stderr)
                continue
            pdocs = pbytes = 0
            for _rel, text in iter_docs(a.src, pkg, kind, pattern):
                line = (json.dumps({"text": text}, ensure_ascii=False) + "\n").encode("utf-8")
                if total + len(line) > a.max_bytes:
                    full = True
                    break
                out.write(line)
                total += len(line)
                ndocs += 1
                pdocs += 1
                pbytes += len(line)
            rows.append((pkg, pdocs, pbytes))
            print(f"{pkg}\t{pdocs} docs\t{pbytes/1e6:.1f} MB", file=sys.stderr)
    os.replace(a.out + ".tmp", a.out)
    print(f"total\t{ndocs} docs\t{total/1e6:.1f} MB -> {a.out}", file=sys.stderr)
    if a.manifest:
        with open(a.manifest, "w") as m:
            m.write("package\tdocs\tjsonl_bytes\n")
            for package, docs, size in rows:
                m.write(f"{package}\t{docs}\t{size}\n")
            m.write(f"total\t{ndocs}\t{total}\n")


if __name__ == "__main__":
    main()
