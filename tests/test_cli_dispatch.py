"""`tidal COMMAND` imports that command's module alone (main.COMMAND_MODULES
says which): the table must name every command where it is defined, and a
command's own parser must be the one the whole parser holds."""

from __future__ import annotations

import argparse
import subprocess
import sys

from tidal_cli import main as cli


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return parser._subparsers._group_actions[0].choices


def test_the_table_names_each_command_and_the_module_that_defines_it():
    for module in cli.COMMANDS:
        name = module.__name__.rsplit(".", 1)[1]
        assert list(_choices(cli.build_parser([module]))) == [c for c, m in cli.COMMAND_MODULES.items() if m == name]
    assert list(_choices(cli.build_parser())) == list(cli.COMMAND_MODULES)


def _helps(parser: argparse.ArgumentParser, path: str) -> dict[str, str]:
    """Every command path's help text, the subcommands' too."""
    found = {path: parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(_helps(sub, f"{path} {name}"))
    return found


def test_a_commands_own_parser_is_the_one_the_whole_parser_holds():
    whole = {name: _helps(sub, f"tidal {name}") for name, sub in _choices(cli.build_parser()).items()}
    for name, module in cli.COMMAND_MODULES.items():
        alone = _choices(cli.build_parser([cli._module(module)]))[name]
        assert _helps(alone, f"tidal {name}") == whole[name]


def test_a_command_imports_neither_the_other_commands_nor_what_they_need():
    code = ("import sys\nfrom tidal_cli.main import main\n"
            "def loaded():\n"
            "    print(sorted(m for m in sys.modules if m.startswith(('tidal_', 'cryptography', 'nats'))))\n"
            "assert main(['--version']) == 0\nloaded()\nassert main(['run', '--help']) == 0\nloaded()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    after_version, after_run = (eval(line) for line in done.stdout.splitlines() if line.startswith("["))
    assert set(after_version) <= {"tidal_cli", "tidal_cli.main", "tidal_cli.errors", "tidal_runtime",
                                  "tidal_runtime.exports"}, after_version
    assert [m for m in after_run if m.endswith("_cmd")] == ["tidal_cli.up_cmd"], after_run
    assert not [m for m in after_run if m.startswith(("cryptography", "tidal_cli.stack", "tidal_cli.webhook"))]
