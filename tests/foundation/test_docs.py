"""The docs match the code: every ``retarget …`` command line in README.md and docs/ names a command and options that
the current CLI has, every repository path they cite exists, and no prose line is longer than 120 characters."""
from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from retarget.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Top-level folders whose files the docs cite by path.
TREE_ROOTS = ("src/", "docs/", "bench/", "config/", "tests/", "launch/", "urdf/", "scripts/", "interfaces/", "docker/")
#: Files the docs cite that a command writes (absent in a fresh clone).
WRITTEN_BY_COMMANDS = {"config/materials.yaml"}  # retarget fit --write
FENCE = re.compile(r"^```")
SPAN = re.compile(r"`([^`\n]+)`")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # noqa: SLF001 - argparse keeps subcommands here only
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}  # noqa: SLF001


def _doc_lines(path: Path) -> list[tuple[int, str, bool]]:
    """(line number, text, inside a fenced block) of a markdown file."""
    out, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        out.append((number, line, fenced))
    return out


def _prose(path: Path) -> list[tuple[int, str]]:
    """(first line number, text) of each prose paragraph outside fenced blocks, its lines joined with spaces (a code
    span may wrap onto the next line, as Markdown allows); a table row is a paragraph of its own."""
    out: list[tuple[int, str]] = []
    current: tuple[int, str] | None = None
    for number, line, fenced in _doc_lines(path):
        text = line.strip()
        joins = not fenced and text and not text.startswith("|")
        if current is not None and (not joins or text.startswith(("#", "- ", "* ")) or re.match(r"\d+\. ", text)):
            out.append(current)
            current = None
        if fenced or not text:
            continue
        if text.startswith("|"):
            out.append((number, text))
        elif current is None:
            current = (number, text)
        else:
            current = (current[0], current[1] + " " + text)
    if current is not None:
        out.append(current)
    return out


def _command_lines(path: Path) -> list[tuple[int, str]]:
    """``retarget …`` command lines: fenced lines starting with it (continuations joined) and code spans."""
    found: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line, fenced in _doc_lines(path):
        if fenced:
            text = line.strip()
            if pending is not None:
                pending = (pending[0], pending[1] + " " + text.rstrip("\\"))
                if not text.endswith("\\"):
                    found.append(pending)
                    pending = None
                continue
            text = re.sub(r"^(\$ |[A-Z_]+=\S+ )+", "", text)
            text = re.sub(r"^(\.venv/bin/|ros2 run retarget )", "", text)
            if text.startswith("retarget "):
                if text.endswith("\\"):
                    pending = (number, text.rstrip("\\"))
                else:
                    found.append((number, text))
    for number, text in _prose(path):
        for span in SPAN.findall(text):
            if span.startswith("retarget ") and not span.startswith("retarget."):
                found.append((number, span))
    return found


def _tokens(command: str) -> list[str]:
    command = command.split(" #")[0]
    command = re.split(r"\s(?:\||&&|;|>|2>)\s", command)[0]
    try:
        return shlex.split(command.replace("…", " ").replace("...", " "))
    except ValueError:
        return command.replace("[", " ").replace("]", " ").split()


def _check_command(parser: argparse.ArgumentParser, command: str) -> str | None:
    tokens = [t.strip("[]()") for t in _tokens(command)[1:]]
    current, path = parser, ["retarget"]
    while True:
        sub = _subparsers(current)
        if not sub or not tokens:
            break
        word = tokens[0]
        if word.startswith("-") or not re.fullmatch(r"[a-z][a-z0-9-]*", word):
            break
        if word not in sub:
            if any(ch in word for ch in "|,"):
                return None  # an alternative such as `check cantilever|fourbar`: checked where spelled out
            return f"no command {' '.join(path + [word])!r}"
        current, path, tokens = sub[word], path + [word], tokens[1:]
    options = _options(current)
    for token in tokens:
        if not token.startswith("--") or token == "--":
            continue
        flag = token.split("=")[0]
        for alternative in flag.split("|"):
            alternative = alternative if alternative.startswith("--") else "--" + alternative
            if re.fullmatch(r"--[a-z0-9][a-z0-9-]*", alternative) and alternative not in options:
                return f"{' '.join(path)} has no option {alternative}"
    return None


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_command_line_names_what_the_cli_has(parser: argparse.ArgumentParser, path: Path) -> None:
    problems = []
    for number, command in _command_lines(path):
        problem = _check_command(parser, command)
        if problem:
            problems.append(f"{path.relative_to(ROOT)}:{number}: `{command}`: {problem}")
    assert not problems, "\n".join(problems)


def _cited_paths(path: Path) -> list[tuple[int, str]]:
    cited = []
    for number, line, _fenced in _doc_lines(path):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", line):
            if not re.match(r"[a-z]+:", target):
                cited.append((number, str((path.parent / target).resolve().relative_to(ROOT))
                               if (path.parent / target).resolve().is_relative_to(ROOT) else target))
    for number, text in _prose(path):
        for span in SPAN.findall(text):
            span = span.strip()
            if span.startswith(TREE_ROOTS) and not re.search(r"[*<>{}…$ ]|\.\.\.|[A-Z]{3,}", span):
                cited.append((number, span.split(":")[0].rstrip("/.,")))
    return cited


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_cited_path_exists(path: Path) -> None:
    missing = [f"{path.relative_to(ROOT)}:{number}: {target}" for number, target in _cited_paths(path)
               if not (ROOT / target).exists() and target not in WRITTEN_BY_COMMANDS]
    assert not missing, "cited but not in the tree:\n" + "\n".join(missing)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_no_prose_line_over_120_characters(path: Path) -> None:
    long = [f"{path.relative_to(ROOT)}:{number}: {len(line)} characters" for number, line, fenced in _doc_lines(path)
            if len(line) > 120 and not line.lstrip().startswith("|") and not fenced]
    assert not long, "\n".join(long)


def test_the_checker_catches_stale_commands(parser: argparse.ArgumentParser) -> None:
    assert _check_command(parser, "retarget plan ROBOT --motion M --json") is None
    assert "no option --frobnicate" in _check_command(parser, "retarget plan ROBOT --frobnicate")
    assert "no command" in _check_command(parser, "retarget frobnicate ROBOT")
