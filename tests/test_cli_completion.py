"""`tidal completion bash|zsh`: the script is valid bash, lists every
subcommand of the parser, and completes as a user types — bash runs the
generated function with COMP_WORDS set as readline sets them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from test_cli import tidal
from tidal_cli.completion_cmd import word_table
from tidal_cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="no bash on this machine")


def script(shell: str) -> str:
    done = tidal("completion", shell)
    assert done.returncode == 0, done.stderr
    return done.stdout


def complete(source: str, *words: str) -> list[str]:
    """What the script offers for the last of `words` (the one being typed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    program = f"{source}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _tidal_completion\n" \
              'printf "%s\\n" "${COMPREPLY[@]}"\n'
    done = subprocess.run([BASH, "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_the_script_is_valid_bash_syntax(tmp_path, shell):
    path = tmp_path / f"tidal.{shell}"
    path.write_text(script(shell))
    checked = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    assert "complete -o default -F _tidal_completion tidal" in path.read_text()
    if shell == "zsh":
        assert path.read_text().startswith("#compdef tidal\n") and "bashcompinit" in path.read_text()


def test_the_script_lists_every_subcommand_of_the_parser():
    text = script("bash")
    commands = build_parser()._subparsers._group_actions[0].choices  # the parser's own list
    assert {"explain", "events", "tenants", "completion", "audit", "node"} <= set(commands)
    top = complete(text, "tidal", "")
    assert set(commands) <= set(top) and "--version" in top
    assert complete(text, "tidal", "events", "") == ["-h", "--help", "tail", "publish"]
    assert set(complete(text, "tidal", "tenants", "")) >= {"apply", "delete", "list"}


def test_it_completes_prefixes_options_and_choices():
    text = script("bash")
    assert complete(text, "tidal", "ex") == ["explain"]
    assert complete(text, "tidal", "events", "tail", "-o", "") == ["table", "json", "yaml"]
    assert complete(text, "tidal", "events", "tail", "--output", "y") == ["yaml"]
    assert complete(text, "tidal", "explain", "--clu") == ["--cluster"]
    assert complete(text, "tidal", "completion", "") == ["-h", "--help", "bash", "zsh"]
    # an option's value does not change the command path: still `events tail`'s options
    assert "--no-follow" in complete(text, "tidal", "events", "tail", "--limit", "3", "--no")


def test_the_table_follows_the_parser():
    table = word_table(build_parser())
    assert table["tidal node audit -o"] == ["table", "json", "yaml"]
    assert "--json" in table["tidal node audit"]  # the older flag still completes
    assert "pick" in table["tidal cpus"]
