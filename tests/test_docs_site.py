"""The documentation is checked (issue 27): the MkDocs site builds strictly, every code block of
README.md and docs/ is run or marked illustrative with the reason, and the blocks marked
``<!-- runs -->`` run.

Conventions (docs/index.md): the line right before a fenced block is either
``<!-- runs -->`` (executed here) or ``<!-- illustrative: REASON -->`` (not run; the reason says
why, usually which test runs the same thing). Blocks marked ``runs`` are executed page by page, in
page order, against a fresh embedded broker per page, as a reader would paste them into one script:

- ``python`` blocks share one namespace per page (a page's later block uses an earlier one's
  names); the session's SparkSession is the one ``get_spark()`` returns. Nothing is added to them:
  a block that starts a streaming query must end it itself (an AvailableNow trigger with
  ``awaitTermination``, ``processAllAvailable``, ``stop``); a query still running when the page's
  blocks are done fails the test. A ``# prints TEXT`` comment is a promise: the block's output
  must contain TEXT;
- ``bash`` blocks run as one script, ``console`` blocks run their ``$ `` lines (their output lines
  are not compared), with ``set -e``;
- the only changes: ``127.0.0.1:9092`` / ``localhost:9092`` become the page broker's address, the
  CLI's tool commands get ``--bootstrap-server`` (their default is 127.0.0.1:9092),
  ``pyspark-kafka`` runs as ``python -m pyspark_kafka`` of this interpreter, and ``/tmp/`` and
  relative ``sqlite:///`` paths point into the test's temporary directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```(\w*)")
MARK = re.compile(r"^\s*<!--\s*(runs|illustrative:\s*(?P<reason>.*?))\s*-->\s*$")
TOOL = re.compile(r"\b(pyspark-kafka (?:topics (?:create|list|describe|delete)|produce|consume|groups (?:list|describe)))\b")


def blocks(path: Path) -> list[dict]:
    """Fenced blocks of a page: ``{"line", "lang", "body", "mark"}`` (mark: the comment line before, or None)."""
    lines = path.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while not lines[j].strip().startswith("```"):
            j += 1
        mark = MARK.match(lines[i - 1]) if i else None
        out.append({"line": i + 1, "lang": m.group(1), "body": "\n".join(lines[i + 1:j]),
                    "mark": None if mark is None else ("runs" if mark.group(1) == "runs" else "illustrative"),
                    "reason": mark.group("reason") if mark else None})
        i = j + 1
    return out


def test_every_block_runs_or_says_why_not():
    unmarked = [f"{p.relative_to(ROOT)}:{b['line']}" for p in PAGES for b in blocks(p) if b["mark"] is None]
    assert unmarked == [], "mark each with <!-- runs --> or <!-- illustrative: REASON -->"
    no_reason = [f"{p.relative_to(ROOT)}:{b['line']}" for p in PAGES for b in blocks(p)
                 if b["mark"] == "illustrative" and len((b["reason"] or "").split()) < 2]
    assert no_reason == []


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` without ``-q``: with ``-q`` MkDocs drops the warnings ``--strict`` counts."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def _warnings(r: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (r.stdout + r.stderr).splitlines() if line.startswith(("WARNING", "ERROR"))]


def test_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: a broken link or anchor (``validation: anchors: warn``) fails it."""
    pytest.importorskip("material", reason="pip install -e '.[docs]' (the test extra includes it)")
    r = _build(ROOT, tmp_path / "site")
    assert r.returncode == 0 and _warnings(r) == [], (r.stdout + r.stderr)[-4000:]
    assert (tmp_path / "site" / "index.html").exists()


def test_site_build_fails_on_a_broken_anchor(tmp_path):
    """The same build over a copy of the site with one broken anchor planted must fail, naming it."""
    pytest.importorskip("material", reason="pip install -e '.[docs]' (the test extra includes it)")
    import shutil

    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text() + "\nSee [nowhere](reader.md#no-such-heading-planted).\n")
    r = _build(tmp_path, tmp_path / "site")
    assert r.returncode != 0
    assert any("no-such-heading-planted" in w for w in _warnings(r)), (r.stdout + r.stderr)[-4000:]


def test_readme_links_resolve():
    """README.md is outside the site: its relative links and anchors are checked here."""
    from markdown.extensions.toc import slugify

    text = (ROOT / "README.md").read_text()
    broken = []
    for target in re.findall(r"\]\(([^)#\s]+)(#[^)\s]+)?\)", text):
        path, anchor = target
        if "://" in path:
            continue
        if not (ROOT / path).exists():
            broken.append(path)
        elif anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.M)
            if anchor[1:] not in {slugify(h, "-") for h in headings}:
                broken.append(path + anchor)
    assert broken == []


def _adapt(text: str, bootstrap: str, tmp: Path) -> str:
    text = text.replace("/tmp/", f"{tmp}/")
    text = re.sub(r"sqlite:///(?!/)", f"sqlite:///{tmp}/", text)
    return text.replace("127.0.0.1:9092", bootstrap).replace("localhost:9092", bootstrap)


def _shell(block: dict, bootstrap: str, tmp: Path) -> str:
    body = block["body"]
    if block["lang"] == "console":
        body = "\n".join(line[2:] for line in body.split("\n") if line.startswith("$ "))
    body = _adapt(body, bootstrap, tmp)
    body = TOOL.sub(lambda m: m.group(1) + (f" --bootstrap-server {bootstrap}"), body)
    body = body.replace(f"--bootstrap-server {bootstrap} --bootstrap-server {bootstrap}", f"--bootstrap-server {bootstrap}")
    return body.replace("pyspark-kafka ", f"{sys.executable} -m pyspark_kafka ")


PROMISE = re.compile(r"#\s*prints\s+(.+?)(?:\s+on the first run.*)?$", re.M)


def run_page(path: Path, tmp: Path, spark=None) -> None:
    """Run the ``<!-- runs -->`` blocks of ``path`` against a fresh embedded broker."""
    import contextlib
    import io

    from pyspark_kafka.broker import EmbeddedBroker

    runnable = [b for b in blocks(path) if b["mark"] == "runs"]
    namespace: dict = {"__name__": "__main__"}
    work = tmp / path.stem
    work.mkdir(parents=True, exist_ok=True)
    with EmbeddedBroker(data_dir=work / "broker") as broker:
        for block in runnable:
            where = f"{path.relative_to(ROOT)}:{block['line']}"
            if block["lang"] == "python":
                code = _adapt(block["body"], broker.bootstrap_servers, work)
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(code, where, "exec"), namespace)
                for promise in PROMISE.findall(block["body"]):
                    assert promise.strip() in out.getvalue(), f"{where} promises {promise!r}, printed {out.getvalue()!r}"
            else:
                script = "set -e\n" + _shell(block, broker.bootstrap_servers, work)
                r = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True, timeout=120)
                assert r.returncode == 0, f"{where}:\n{script}\n{r.stderr[-3000:]}"
        if spark is not None:
            running = list(spark.streams.active)
            for query in running:
                query.stop()
            assert running == [], f"{path.name} leaves a streaming query running: show how it ends"


def _pages_with(predicate) -> list[Path]:
    return [p for p in PAGES if any(b["mark"] == "runs" and predicate(b) for b in blocks(p))]


def _uses_spark(block: dict) -> bool:
    return re.search(r"(?<![\w.])spark\.|get_spark", block["body"]) is not None


def _uses_cluster(block: dict) -> bool:
    return "EmbeddedCluster" in block["body"]


def _quick_pages() -> list[str]:
    """Pages with runnable blocks none of which needs Spark or a multi-process cluster."""
    return [p.name for p in _pages_with(lambda b: True)
            if not any(_uses_spark(b) or _uses_cluster(b) for b in blocks(p) if b["mark"] == "runs")]


@pytest.mark.parametrize("page", _quick_pages())
def test_quick_blocks_run(page, tmp_path):
    """Pages whose runnable blocks need neither Spark nor a multi-process cluster (the CLI, the broker)."""
    run_page(next(p for p in PAGES if p.name == page), tmp_path)


@pytest.mark.slow
def test_spark_blocks_run(spark, tmp_path):
    """The pages whose runnable blocks use Spark (README: Reading, Writing, then exactly-once into SQL)."""
    pages = _pages_with(_uses_spark)
    assert {p.name for p in pages} >= {"README.md", "reader.md"}
    for page in pages:
        run_page(page, tmp_path, spark)
    import sqlite3

    rows = sqlite3.connect(tmp_path / "README" / "orders.db").execute("SELECT count(*) FROM orders").fetchone()[0]
    assert rows == 2  # the two records the Writing block wrote, once


@pytest.mark.slow
def test_cluster_blocks_run(tmp_path):
    """testing-your-jobs.md's leader failover on ``EmbeddedCluster`` (its AdminClient used to fail with _DESTROY)."""
    pages = _pages_with(_uses_cluster)
    assert [p.name for p in pages] == ["testing-your-jobs.md"]
    for page in pages:
        run_page(page, tmp_path)


# --- Two audiences (issue 37): user pages are short and free of the project's internals ---------

NAV_CONTRIBUTOR = "For contributors"
MAX_USER_WORDS = 3000
MAX_LINE = 200
INTERNAL_PATH = re.compile(r"\b(?:connector|tests|integration_tests|bench)/[\w./*-]*|\bpyspark_kafka/[\w/*-]*\.py\b")
ISSUE_NUMBER = re.compile(r"\bissues? \d+|(?<![\w.)(/#&])#\d{2,}\b|\brounds? \d", re.I)


def nav_pages() -> tuple[list[str], list[str]]:
    """``(user pages, contributor pages)`` of ``mkdocs.yml``'s nav, as paths under ``docs/``.

    A top-level nav section whose title starts with ``For contributors`` is a contributor
    section; every other section is for users (docs/index.md states the rule for readers).
    """
    import yaml

    def leaves(node) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [p for n in node for p in leaves(n)]
        return [p for v in node.values() for p in leaves(v)]

    user, contributor = [], []
    for section in yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]:
        ((title, node),) = section.items()
        (contributor if title.startswith(NAV_CONTRIBUTOR) else user).extend(leaves(node))
    return user, contributor


def prose(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of a page outside fenced code blocks, HTML comments blanked."""
    text = re.sub(r"<!--.*?-->", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.S)
    out, fenced = [], False
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((number, line))
    return out


def user_page_problems(name: str, text: str) -> list[str]:
    """What makes ``text`` (page ``name``) wrong for a user page: over ``MAX_USER_WORDS`` words, or
    naming a module or test file, or an issue or round number.

    Words are ``len(line.split())`` summed over the prose: fenced code blocks and HTML comments
    (the ``runs``/``illustrative`` marks, which readers do not see) are not counted and not
    searched; inline code is (a file path in backticks is still a path). ``pyspark_kafka.x``
    import names are fine: users type them.
    """
    lines = prose(text)
    problems = []
    words = sum(len(line.split()) for _, line in lines)
    if words > MAX_USER_WORDS:
        problems.append(f"{name}: {words} words (at most {MAX_USER_WORDS}: move internals to a contributor page)")
    for number, line in lines:
        for pattern, what in ((INTERNAL_PATH, "a module or test path"), (ISSUE_NUMBER, "an issue number")):
            for m in pattern.finditer(line):
                problems.append(f"{name}:{number}: {what} {m.group()!r}")
    return problems


def long_lines(name: str, text: str) -> list[str]:
    """Lines over ``MAX_LINE`` characters outside code blocks and tables (wrap prose near 110)."""
    return [f"{name}:{number}: {len(line)} characters" for number, line in prose(text)
            if len(line) > MAX_LINE and not line.lstrip().startswith("|")]


def test_nav_has_both_audiences():
    user, contributor = nav_pages()
    assert {"index.md", "getting-started.md", "reader.md", "writer.md"} <= set(user)
    assert {"architecture.md", "testing.md", "benchmark-results.md", "benchmark-history.md"} <= set(contributor)
    assert not set(user) & set(contributor)


def test_user_pages_are_short_and_free_of_internals():
    """User pages: at most 3,000 words of prose, no module/test paths, no issue or round numbers."""
    user, _ = nav_pages()
    problems = [p for page in user for p in user_page_problems(page, (ROOT / "docs" / page).read_text())]
    assert problems == [], "\n".join(problems)


def test_checks_catch_planted_defects():
    """The checks above fail on a planted defect of each kind (and pass on clean prose)."""
    clean = "# Page\n\nRead with `from pyspark_kafka.sinks import stored_offsets`; see [x](reader.md#a-1).\n"
    assert user_page_problems("p.md", clean) == []
    assert user_page_problems("p.md", "word " * 3001)
    assert user_page_problems("p.md", "See `connector/pyspark_kafka/read/batch.py`.")
    assert user_page_problems("p.md", "Tested by tests/test_cli.py.")
    assert user_page_problems("p.md", "Fixed in issue 27.")
    assert user_page_problems("p.md", "Measured in round 3.")
    assert user_page_problems("p.md", "See #34.")
    assert user_page_problems("p.md", "```\nconnector/x.py #34\n```\n") == []
    assert long_lines("p.md", "x " * 150) and not long_lines("p.md", "| " + "x " * 150 + "|")


def test_no_long_lines():
    """Every docs page (both audiences): no line over 200 characters outside code blocks and tables."""
    problems = [p for page in PAGES[1:] for p in long_lines(page.name, page.read_text())]
    assert problems == [], "\n".join(problems)
