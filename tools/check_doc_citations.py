#!/usr/bin/env python3
"""Every comment under src/, tools/, include/ and tests/ that cites a document must cite a file
of this repository, and a section of it that exists (issue 13: comments cited spec files that
were never in the repository). Exits 1 listing each bad citation.

Rules, on the text of every comment (C/C++/CUDA: // and /* */; shell, CMake, Python: # lines,
and Python docstrings):
  - NAME.md must be written with its folder (docs/NAME.md, tests/data/hf/README.md, ...), the
    path taken from the repository root, and that file must exist;
  - a section after it (docs/X.md section 3, sections 1-2, docs/X.md 5.4, docs/X.md 2, 6)
    must be a numbered heading of that file ("## 3. ...", "### 5.4 ..."); a quoted title after
    it (docs/X.md "Dequantization") must be a heading's text;
  - no citation of an outside spec: a path with specs/ in it, or "the spec 5.4" / "spec (5.4)"
    (name the docs/ file instead).

Usage: tools/check_doc_citations.py [ROOT]
"""
import os
import re
import sys

SCAN_DIRS = ("src", "tools", "include", "tests")
SKIP_DIRS = ("tests/data", "tests/fuzz/corpus")
SKIP_FILES = ("tools/check_doc_citations.py",)  # its docstring shows the forms it rejects
C_EXTS = (".c", ".h", ".cu", ".cuh", ".cpp", ".cc", ".hpp")
HASH_EXTS = (".sh", ".py", ".cmake", ".txt")

MD = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
SECTION = re.compile(
    r"\A[ \t]*(?:,[ \t]*)?(?:(?:section|sections|§)[ \t]*)?(\d+(?:\.\d+)*)((?:[ \t]*(?:-|–|,|and|or|to)[ \t]*\d+(?:\.\d+)*)*)"
)
QUOTED = re.compile(r'\A[ \t]*(?:,[ \t]*)?(?:section[ \t]*)?"([^"]+)"')
OUTSIDE_SPEC = re.compile(r"(\S*\bspecs/\S*)|(\b(?:the[ \t]+)?spec\b[ \t]*\(?[ \t]*\d+(?:\.\d+)*)", re.I)


def c_comments(text):
    """(line, comment text) of each comment, continuation markers removed."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            line = text.count("\n", 0, i) + 1
            # join consecutive // lines into one comment
            if out and out[-1][2] == line - 1 and out[-1][3] == "//":
                out[-1] = (out[-1][0], out[-1][1] + " " + text[i + 2 : j], line, "//")
            else:
                out.append((line, text[i + 2 : j], line, "//"))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            body = re.sub(r"\n[ \t]*\*?", " ", text[i + 2 : j])
            out.append((text.count("\n", 0, i) + 1, body, text.count("\n", 0, j) + 1, "/*"))
            i = j + 2
        else:
            i += 1
    return [(a, b) for a, b, _, _ in out]


def hash_comments(text, python):
    out = []
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        ln = lines[k]
        stripped = ln.strip()
        if python and (stripped.startswith('"""') or stripped.startswith("'''") or re.match(r"\w+\s*=\s*\"\"\"", stripped)):
            q = '"""' if '"""' in stripped else "'''"
            start = k
            body = [ln]
            if stripped.count(q) < 2:
                k += 1
                while k < len(lines) and q not in lines[k]:
                    body.append(lines[k])
                    k += 1
                if k < len(lines):
                    body.append(lines[k])
            out.append((start + 1, " ".join(body)))
            k += 1
            continue
        m = re.search(r"(?:^|\s)#(?!!)(.*)$", ln)
        if m:
            out.append((k + 1, m.group(1)))
        k += 1
    # join consecutive # lines
    joined = []
    for line, body in out:
        if joined and joined[-1][2] == line - 1:
            joined[-1] = (joined[-1][0], joined[-1][1] + " " + body, line)
        else:
            joined.append((line, body, line))
    return [(a, b) for a, b, _ in joined]


_headings = {}


def headings(path):
    if path not in _headings:
        hs = []
        with open(path, encoding="utf-8", errors="replace") as f:
            for ln in f:
                m = re.match(r"^#+\s+(.*)$", ln)
                if m:
                    hs.append(m.group(1).strip())
        _headings[path] = hs
    return _headings[path]


def section_exists(path, num):
    for h in headings(path):
        m = re.match(r"^(\d+(?:\.\d+)*)\.?(\s|$)", h)
        if m and m.group(1) == num:
            return True
    return False


def check_comment(root, rel, line, body, problems):
    for m in OUTSIDE_SPEC.finditer(body):
        problems.append("%s:%d: cites an outside spec '%s' (cite a docs/ file and its section)" % (rel, line, m.group(0).strip()))
    for m in MD.finditer(body):
        cited = m.group(1)
        full = os.path.join(root, cited)
        if "/" not in cited:
            hint = " (docs/%s?)" % cited if os.path.exists(os.path.join(root, "docs", cited)) else ""
            problems.append("%s:%d: '%s' without its folder%s" % (rel, line, cited, hint))
            continue
        if not os.path.isfile(full):
            problems.append("%s:%d: '%s' is not a file of the repository" % (rel, line, cited))
            continue
        rest = body[m.end():]
        q = QUOTED.match(rest)
        if q:
            title = q.group(1).strip()
            if not any(title == h or h.startswith(title) or title in h for h in headings(full)):
                problems.append('%s:%d: %s has no heading "%s"' % (rel, line, cited, title))
            continue
        s = SECTION.match(rest)
        if not s:
            continue
        nums = [s.group(1)] + re.findall(r"\d+(?:\.\d+)*", s.group(2) or "")
        for num in nums:
            if not section_exists(full, num):
                problems.append("%s:%d: %s has no section %s" % (rel, line, cited, num))


def main(argv):
    root = os.path.abspath(argv[0] if argv else os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    problems = []
    n_files = n_cites = 0
    for d in SCAN_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames.sort()
            reld = os.path.relpath(dirpath, root).replace(os.sep, "/")
            if reld.startswith(SKIP_DIRS):
                dirnames[:] = []
                continue
            for fn in sorted(filenames):
                p = os.path.join(dirpath, fn)
                rel = os.path.relpath(p, root).replace(os.sep, "/")
                if rel in SKIP_FILES:
                    continue
                if fn.endswith(C_EXTS):
                    comments = c_comments(open(p, encoding="utf-8", errors="replace").read())
                elif fn.endswith(HASH_EXTS) or fn == "CMakeLists.txt":
                    comments = hash_comments(open(p, encoding="utf-8", errors="replace").read(), fn.endswith(".py"))
                else:
                    continue
                n_files += 1
                for line, body in comments:
                    n_cites += len(MD.findall(body))
                    check_comment(root, rel, line, body, problems)
    for p in problems:
        print("FAIL " + p)
    if problems:
        print("FAIL: %d bad citation(s)" % len(problems))
        return 1
    if n_cites == 0:
        print("FAIL: no citation found under %s (wrong root?)" % root)
        return 1
    print("ok: %d files, %d document citations, all of repository files and existing sections" % (n_files, n_cites))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
