#!/usr/bin/env python3
"""Checks that every repository path the docs name exists.

Usage: check_doc_paths.py ROOT

Reads, under ROOT: README.md, docs/*.md, bench/README.md, ledger/README.md,
fuzz/README.md and every README.md under deploy/. Prints one line per path that does not
exist, as FILE:LINE: PATH (FILE relative to ROOT), and exits 1 if there is
any; exits 0 when every path exists, 2 on a usage error.

What is read:
  * inline code spans (`...`, also ``...``; a span may wrap onto the next
    line of its paragraph). Each span is split at whitespace; in a word like
    KEY=VALUE only VALUE is kept. Fenced code blocks (``` or ~~~) and
    indented code blocks are not read: they hold commands and output.
  * Markdown link targets, [text](TARGET) and [label]: TARGET, with any
    #anchor removed. URLs (anything with "://", mailto:) and bare #anchors
    are not paths.

Which words are repository paths:
  * A link target always is; it is resolved from the folder of the doc that
    holds it, as Markdown does.
  * A word in a code span is one when, after the trimming below, it
    - starts with a top-level folder or file of ROOT ("scheduler/x.h",
      "CMakeLists.txt", ".ci/run"), or with an entry of the doc's own folder
      ("k8s/README.md" in deploy/README.md), or
    - contains a "/" and ends in a source extension (SOURCE_EXTENSIONS:
      .h .cc .py .proto ...): a source file in a folder that does not exist
      is a missing path too.
    It is resolved from ROOT, from the doc's own folder (a folder's README
    may name its files relative to itself), and a .proto file also from
    proto/, the import root ("trellis/v1/rollout.proto").

Trimming: quotes, brackets and trailing punctuation around the word; a
C++ qualifier after a file ("loop/step.cc::Step" -> "loop/step.cc"); a line
or line range ("ledger/ledger.cc:120", ":120-140"); a trailing "/".

What is never a repository path (skipped, not reported):
  * absolute paths ("/tmp/x", "/usr/bin/python3", "/metrics") and "~/";
  * paths under the folders a run or a build writes: build/, build-fuzz/,
    runs/ (OUTPUT_PREFIXES);
  * placeholders: a word with any of < > { } * $ ... or an ellipsis
    ("step_<k>", "dashboard.{html,css,js}", "deploy/k8s/*.yaml"), or with a
    component that is a capitalised name standing for a value, such as OUT,
    RUN, RUN_DIR, JOB.yaml, DATA.jsonl (all capitals, digits and "_"; README,
    LICENSE and the like excepted), or one that ends in such a letter
    ("seedN", "step_K").

A path with no extension that is not there passes when a file of that name
with an extension is (a binary or script built or run from it:
"tests/resume_test" from tests/resume_test.cc, "bench/plan_bench").
"""

import glob
import os
import re
import sys

SOURCE_EXTENSIONS = (
    ".h", ".hpp", ".cc", ".cpp", ".c", ".py", ".proto", ".sh", ".cmake",
    ".js", ".css", ".html", ".sbatch",
)
OUTPUT_PREFIXES = ("build/", "build-fuzz/", "runs/")
PROTO_IMPORT_ROOT = "proto"
CONVENTIONAL_CAPITALS = {
    "README", "LICENSE", "NOTICE", "CHANGELOG", "CONTRIBUTING", "AUTHORS",
    "CMAKELISTS", "MAKEFILE", "DOCKERFILE",
}
PLACEHOLDER_MARKS = ("<", ">", "{", "}", "*", "$", "...", "\u2026")

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)",
                        re.DOTALL)
_INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)",
                             re.MULTILINE)
_LINE_SUFFIX = re.compile(r":\d+(-\d+)?$")
_CAPITAL_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_ENDS_IN_CAPITAL = re.compile(r"[a-z_][A-Z]$")


def doc_files(root):
    """The docs to read, as paths relative to root, in a stable order."""
    names = ["README.md", "bench/README.md", "ledger/README.md", "fuzz/README.md"]
    names += sorted(os.path.relpath(p, root)
                    for p in glob.glob(os.path.join(root, "docs", "*.md")))
    names += sorted(
        os.path.relpath(p, root)
        for p in glob.glob(os.path.join(root, "deploy", "**", "README.md"),
                           recursive=True))
    return [n for n in names if os.path.isfile(os.path.join(root, n))]


def blank_code_blocks(text):
    """text with fenced and indented code blocks blanked, lines kept."""
    out = []
    fence = None
    previous_blank = True
    in_indented = False
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if fence is not None:
            if match and match.group(1) == fence:
                fence = None
            out.append("")
            continue
        if match:
            fence = match.group(1)
            out.append("")
            continue
        is_blank = not line.strip()
        indented = line.startswith("    ") or line.startswith("\t")
        if indented and (previous_blank or in_indented) and not is_blank:
            in_indented = True
            out.append("")
            continue
        if not is_blank:
            in_indented = False
        previous_blank = is_blank
        out.append(line)
    return "\n".join(out)


def is_placeholder(word):
    if any(mark in word for mark in PLACEHOLDER_MARKS):
        return True
    for component in word.split("/"):
        stem = component.split(".")[0]
        if not stem:
            continue
        if (_CAPITAL_NAME.match(stem)
                and stem.upper() not in CONVENTIONAL_CAPITALS):
            return True
        if _ENDS_IN_CAPITAL.search(stem):
            return True
    return False


def trim(word):
    """The path a word of a code span names, or "" when none."""
    if "=" in word:
        word = word.rsplit("=", 1)[1]
    word = word.strip("\"'`()[],;")
    word = word.rstrip(".:")
    if "::" in word:
        word = word.split("::", 1)[0]
    word = _LINE_SUFFIX.sub("", word)
    return word


def skipped(path):
    """True for what is never a repository path (see the module doc)."""
    if not path or "://" in path or path.startswith(("/", "~", "mailto:")):
        return True
    normal = path[2:] if path.startswith("./") else path
    if normal.startswith(OUTPUT_PREFIXES):
        return True
    return is_placeholder(path)


def exists(path):
    if os.path.exists(path):
        return True
    folder, name = os.path.split(path.rstrip("/"))
    if "." in name or not os.path.isdir(folder or "."):
        return False
    return any(entry.startswith(name + ".") for entry in os.listdir(folder or "."))


def looks_like_repo_path(word, known_first_components):
    if word.split("/", 1)[0] in known_first_components:
        return True
    return "/" in word and word.endswith(SOURCE_EXTENSIONS)


def bases_for(word, root, doc_dir):
    """The folders a word of a code span may be relative to."""
    bases = [root, doc_dir]
    if word.endswith(".proto"):
        bases.append(os.path.join(root, PROTO_IMPORT_ROOT))
    return bases


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def check_doc(root, name, top_level):
    """[(line, path)] for each path doc `name` names that is missing."""
    with open(os.path.join(root, name), encoding="utf-8") as f:
        text = blank_code_blocks(f.read())
    doc_dir = os.path.dirname(os.path.join(root, name))
    known_first_components = top_level | set(os.listdir(doc_dir))
    missing = []
    for span in _CODE_SPAN.finditer(text):
        start = span.start(2)
        for word_match in re.finditer(r"\S+", span.group(2)):
            word = trim(word_match.group(0))
            if skipped(word) or not looks_like_repo_path(
                    word, known_first_components):
                continue
            if any(exists(os.path.join(base, word))
                   for base in bases_for(word, root, doc_dir)):
                continue
            missing.append((line_of(text, start + word_match.start()), word))
    for pattern in (_INLINE_LINK, _REFERENCE_LINK):
        for link in pattern.finditer(text):
            target = link.group(1).split("#", 1)[0]
            if skipped(target):
                continue
            if not exists(os.path.join(doc_dir, target)):
                missing.append((line_of(text, link.start(1)), target))
    return sorted(set(missing))


def check(root):
    """['FILE:LINE: PATH'] for every missing path, in doc and line order."""
    top_level = {entry for entry in os.listdir(root) if entry != ".git"}
    top_level -= {prefix.rstrip("/") for prefix in OUTPUT_PREFIXES}
    report = []
    for name in doc_files(root):
        for line, path in check_doc(root, name, top_level):
            report.append("%s:%d: %s" % (name, line, path))
    return report


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        sys.stderr.write("usage: check_doc_paths.py ROOT\n")
        return 2
    report = check(argv[1])
    for line in report:
        print(line)
    if report:
        print("%d path(s) named in the docs do not exist" % len(report),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
