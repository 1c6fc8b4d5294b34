"""The docs test: every command in README.md and docs/*.md runs, so none goes stale.

One test per file, so `--durations` shows each. A file's blocks run in order, in one fresh
working directory (a tour's later commands see the files its earlier ones wrote), with this
interpreter as `python` and its environment's `state-store` first on PATH.

- ```bash, ```sh, ```shell and ```console blocks: every command runs with bash in that
  directory and must exit 0 (a console block's commands are its `$ ` lines; a line ending
  in a backslash continues on the next; comment lines are skipped). Each command is a bash
  process of its own: a `cd` or a variable does not carry over to the next line.
- ```python blocks: compiled, and every name imported from `state_store` must exist. A
  block marked `run` is also run with `python` in the working directory.
- A Markdown table marked `table from COMMAND` must be one of the tables COMMAND prints
  (the option tables are `state-store options`' output).
- Every `spark.sql.streaming.stateStore.pyrocks.<key>` named must be an option, every
  `state-store <subcommand>` named in code must be a subcommand, and every relative link
  must reach a file of the repository (and a heading of it, for a `#anchor`).

Markers are HTML comments on the line(s) just before a block (blank lines may sit between):

    <!-- docs-test: skip REASON -->    not run; the reason is required (a cluster, credentials,
                                       a URL to install from, a query running elsewhere)
    <!-- docs-test: exit N -->         every command of the block must exit N, with no
                                       Python traceback (a block showing an exit code)
    <!-- docs-test: run -->            a python block: run it too
    <!-- docs-test: table from CMD --> before a Markdown table: CMD prints it too
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGS = {"bash", "sh", "shell", "console"}
COMMAND_TIMEOUT_S = 900  # one command; a demo run takes well under a minute
TRACEBACK = "Traceback (most recent call last)"
# fresh-check (../shared/tools/fresh-check) runs the README's FIRST ```bash block: set-up.
SETUP_COMMANDS = ['pip install -e . && state-store demo',
                  'pip install -e ".[dev]" && python -m pytest -n 3 --dist loadgroup']

MARKER = re.compile(r"^\s*<!--\s*docs-test:(.*?)-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,})\s*([^\s`]*)[^`]*$")
OPTION_KEY = re.compile(r"spark\.sql\.streaming\.stateStore\.pyrocks\.([A-Za-z_][A-Za-z0-9_]*)")
SUBCOMMAND = re.compile(r"(?:^|[\s`(;|&])state-store\s+([a-z][a-z-]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


class DocsError(Exception):
    """The file itself is wrong: a marker, a fence, a name."""


@dataclass
class Marks:
    skip: str | None = None
    exit_code: int = 0
    run: bool = False
    table_from: str | None = None
    line: int = 0  # of the first marker, 0 if none


@dataclass
class Block:
    lang: str
    line: int  # of the opening fence, 1-based
    lines: list[str]
    marks: Marks

    @property
    def where(self) -> str:
        return f"```{self.lang} block at line {self.line}"


@dataclass
class Table:
    command: str
    line: int
    rows: list[str]


@dataclass
class Doc:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


# ---- reading a file ------------------------------------------------------------------------

def parse(path: Path) -> Doc:
    doc, lines = Doc(path), path.read_text().splitlines()
    pending: Marks | None = None
    i = 0
    while i < len(lines):
        text, number = lines[i], i + 1
        marker = MARKER.match(text)
        if marker:
            try:
                pending = _add_mark(pending or Marks(line=number), marker.group(1).strip())
            except DocsError as e:
                raise DocsError(f"{path.name}:{number}: {e}") from None
            i += 1
            continue
        fence = FENCE.match(text)
        if fence:
            indent, ticks, lang = fence.groups()
            end = next((j for j in range(i + 1, len(lines))
                        if lines[j].strip().startswith(ticks) and not lines[j].strip(" `")), None)
            if end is None:
                raise DocsError(f"{path.name}:{number}: the code block opened here is never "
                                "closed")
            body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip()
                    for ln in lines[i + 1:end]]
            doc.blocks.append(Block(lang.lower(), number, body, pending or Marks()))
            _check_marks(doc.blocks[-1], path)
            pending, i = None, end + 1
            continue
        if pending is not None and text.strip():
            if pending.table_from is not None and text.lstrip().startswith("|"):
                rows = []
                while i < len(lines) and lines[i].lstrip().startswith("|"):
                    rows.append(lines[i].strip())
                    i += 1
                doc.tables.append(Table(pending.table_from, number, rows))
                pending = None
                continue
            raise DocsError(f"{path.name}:{pending.line}: a docs-test marker must come right "
                            f"before a code block{' or a table' if pending.table_from else ''}, "
                            f"not before line {number}: {text.strip()[:60]!r}")
        i += 1
    if pending is not None:
        raise DocsError(f"{path.name}:{pending.line}: a docs-test marker at the end of the file")
    return doc


def _add_mark(marks: Marks, text: str) -> Marks:
    word, _, rest = text.partition(" ")
    rest = rest.strip()
    if word == "skip":
        if not rest:
            raise DocsError("`docs-test: skip` needs a reason, e.g. "
                            "`<!-- docs-test: skip needs a YARN cluster -->`")
        marks.skip = rest
    elif word == "exit" and rest.isdigit():
        marks.exit_code = int(rest)
    elif word == "run" and not rest:
        marks.run = True
    elif word == "table" and rest.startswith("from ") and rest[5:].strip():
        marks.table_from = rest[5:].strip()
    else:
        raise DocsError(f"unknown docs-test marker {text!r}; known: `skip REASON`, "
                        "`exit N`, `run`, `table from COMMAND`")
    return marks


def _check_marks(block: Block, path: Path) -> None:
    marks = block.marks
    if marks.table_from is not None:
        raise DocsError(f"{path.name}:{marks.line}: `table from` goes before a table, not a "
                        "code block")
    if marks.run and block.lang != "python":
        raise DocsError(f"{path.name}:{marks.line}: `run` is for python blocks ({block.where} "
                        "runs anyway)")
    runs = block.lang in SHELL_LANGS or (block.lang == "python" and marks.run)
    if marks.exit_code and not runs:
        raise DocsError(f"{path.name}:{marks.line}: `exit` on a block that does not run "
                        f"({block.where})")


def commands(block: Block) -> list[str]:
    """The block's commands: a console block's `$ ` lines, every other non-comment line of a
    shell block; a line ending in a backslash continues on the next."""
    found: list[str] = []
    current: list[str] = []
    for raw in block.lines:
        line = raw.rstrip()
        if not current:
            if block.lang == "console":
                if not line.startswith("$ "):
                    continue  # output
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        current.append(line)
        if not line.endswith("\\"):
            found.append("\n".join(current))
            current = []
    if current:
        found.append("\n".join(current))
    return found


# ---- checks that need nothing to run -------------------------------------------------------

def check_names(doc: Doc, text: str) -> list[str]:
    """Option keys and subcommands the file names that do not exist."""
    from state_store import options
    from state_store.cli import COMMANDS

    problems = [f"unknown option spark.sql.streaming.stateStore.pyrocks.{key}"
                for key in sorted(set(OPTION_KEY.findall(text))) if key not in options.BY_KEY]
    subcommands = {c.name for c in COMMANDS}
    code = [c for b in doc.blocks if b.lang in SHELL_LANGS for c in commands(b)]
    code += re.findall(r"`([^`\n]+)`", text)  # inline code
    named = {m for snippet in code for m in SUBCOMMAND.findall(snippet)}
    known = ", ".join(sorted(subcommands))
    problems += [f"`state-store {name}` is not a subcommand (known: {known})"
                 for name in sorted(named - subcommands)]
    return problems + check_links(doc.path, text)


def anchors(text: str) -> set[str]:
    """The `#anchor`s of a Markdown file's headings, as GitHub makes them."""
    found: set[str] = set()
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        heading = None if in_code else HEADING.match(line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower().replace("`", ""))
            found.add(slug.replace(" ", "-"))
    return found


def check_links(path: Path, text: str) -> list[str]:
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"link to {target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            problems.append(f"link to {target}: {linked.name} has no heading #{anchor}")
    return problems


def check_python(block: Block, path: Path) -> list[str]:
    """Compiles the block; every `state_store` name it imports must exist."""
    source = "\n".join(block.lines)
    try:
        tree = ast.parse(source, f"{path.name}:{block.line}")
        compile(tree, f"{path.name}:{block.line}", "exec")
    except SyntaxError as e:
        return [f"{block.where} does not compile: {e}"]
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted = [(node.module, alias.name) for alias in node.names if alias.name != "*"]
        else:
            continue
        for module, name in wanted:
            if module != "state_store" and not module.startswith("state_store."):
                continue
            try:
                imported = importlib.import_module(module)
            except ImportError as e:
                problems.append(f"{block.where}: `import {module}` fails: {e}")
                continue
            if name is not None and not hasattr(imported, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    problems.append(f"{block.where}: `from {module} import {name}`: "
                                    f"{module} has no {name}")
    return problems


# ---- running -------------------------------------------------------------------------------

def environment(bin_dir: Path) -> dict[str, str]:
    """This interpreter as `python` (a link in `bin_dir`), then its environment's scripts
    (`state-store`), then the PATH the tests run with."""
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    scripts = [str(Path(sys.executable).parent), sysconfig.get_path("scripts")]
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(dict.fromkeys([str(bin_dir), *scripts,
                                                 env.get("PATH", "")]))
    found = shutil.which("state-store", path=env["PATH"])
    if found is None or str(Path(found).parent) not in scripts:
        pytest.fail(f"`state-store` is not installed beside {sys.executable} (found: {found}); "
                    "run `pip install -e .` in this environment")
    return env


def run(command: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        return -1, f"{out or ''}\n(timed out after {COMMAND_TIMEOUT_S} s)", COMMAND_TIMEOUT_S
    return done.returncode, done.stdout, time.monotonic() - started


def tables_in(output: str) -> list[list[str]]:
    """The Markdown tables in a command's output: runs of lines that start with `|`."""
    tables: list[list[str]] = [[]]
    for line in output.splitlines():
        if line.lstrip().startswith("|"):
            tables[-1].append(line.strip())
        elif tables[-1]:
            tables.append([])
    return [t for t in tables if t]


def first_difference(table: Table, printed: list[list[str]]) -> str:
    same_header = [t for t in printed if t[:1] == table.rows[:1]]
    if not same_header:
        return f"No printed table has the header {table.rows[0]!r}."
    rows = same_header[0]
    return next((f"First difference, line {table.line + n}: page has {a!r}, command prints {b!r}"
                 for n, (a, b) in enumerate(zip(table.rows, rows, strict=False)) if a != b),
                f"The page has {len(table.rows)} rows, the command prints {len(rows)}.")


def _failure(path: Path, block: Block, command: str, code: int, output: str, why: str) -> str:
    tail = "\n".join(output.rstrip().splitlines()[-60:])
    return (f"{path.relative_to(ROOT)}: {block.where}: {why}\n"
            f"--- block ---\n" + "\n".join(block.lines) +
            f"\n--- command ---\n{command}\n--- exit {code}; output (last 60 lines) ---\n{tail}")


@pytest.mark.parametrize("path", DOC_FILES, ids=[str(p.relative_to(ROOT)) for p in DOC_FILES])
def test_docs_file(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        doc = parse(path)
    except DocsError as e:
        pytest.fail(str(e))
    text = path.read_text()
    problems = check_names(doc, text)
    for block in doc.blocks:
        if block.lang == "python":
            problems += check_python(block, path)
    assert not problems, f"{path.relative_to(ROOT)}:\n" + "\n".join(problems)

    work = tmp_path / "work"
    work.mkdir()
    env = environment(tmp_path / "bin")
    ran = skipped = python_checked = 0
    log: list[str] = []
    for block in doc.blocks:
        if block.marks.skip is not None:
            skipped += 1
            log.append(f"  skipped {block.where}: {block.marks.skip}")
            continue
        if block.lang == "python":
            python_checked += 1
            if not block.marks.run:
                continue
            script = work / f"docs_block_line_{block.line}.py"
            script.write_text("\n".join(block.lines) + "\n")
            to_run = [f"python {script.name}"]
        elif block.lang in SHELL_LANGS:
            to_run = commands(block)
        else:
            continue
        ran += 1
        for command in to_run:
            code, output, seconds = run(command, work, env)
            log.append(f"  {seconds:6.1f} s  exit {code}  {command.splitlines()[0][:80]}")
            expected = block.marks.exit_code
            if code != expected:
                pytest.fail(_failure(path, block, command, code, output,
                                     f"exited {code}, expected {expected}"))
            if expected and TRACEBACK in output:
                pytest.fail(_failure(path, block, command, code, output,
                                     "printed a Python traceback"))
    for table in doc.tables:
        code, output, _ = run(table.command, work, env)
        printed = tables_in(output)
        if code != 0 or table.rows not in printed:
            pytest.fail(f"{path.relative_to(ROOT)}: the table at line {table.line} is not one "
                        f"`{table.command}` prints (exit {code}); replace it with the command's "
                        f"output. {first_difference(table, printed)}")
    with capsys.disabled():
        print(f"\n{path.relative_to(ROOT)}: {ran} blocks run, {skipped} skipped, "
              f"{python_checked} python blocks checked, {len(doc.tables)} tables compared")
        print("\n".join(log))


def test_readme_setup_block_is_what_fresh_check_runs() -> None:
    """fresh-check runs every non-comment line of the README's first ```bash block."""
    first = next(b for b in parse(ROOT / "README.md").blocks if b.lang == "bash")
    assert commands(first) == SETUP_COMMANDS
    assert first.marks.skip, "the set-up block installs the project: it needs a skip marker"
