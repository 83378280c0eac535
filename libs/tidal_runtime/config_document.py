"""The whole TidalConfiguration: its default file and its check.

Built from the settings classes themselves (the CLI passes every service's),
so the file, its check and the reference (`config_reference`) cannot drift
from what the services read.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from .configuration import (API_VERSION, COMMON, KIND, SECTIONS, ConfigurationError, common_class, env_only,
                            file_key, parse_yaml, read_bounded, read_section, top_level_problems)


@functools.cache
def isolated(cls: type[BaseSettings]) -> type[BaseSettings]:
    """`cls` reading its keyword arguments only: no environment, no file
    (what a file is checked with, and where the defaults come from)."""

    def sources(_cls, settings_cls, init_settings, **_rest):  # type: ignore[no-untyped-def]
        return (init_settings,)

    return type(cls.__name__, (cls,), {"settings_customise_sources": classmethod(sources),
                                       "__module__": cls.__module__})


def own_fields(cls: type[BaseSettings]) -> list[str]:
    """The fields a section lists: those of `cls` beyond the common ones
    (all of them for the common class), without the environment-only ones."""
    common = set() if cls is common_class() else set(common_class().model_fields)
    return [name for name, field in cls.model_fields.items() if name not in common and not env_only(field)]


@dataclass(frozen=True)
class TidalConfiguration:
    """`apiVersion: config.tidal.dev/v1alpha1`, `kind: TidalConfiguration`:
    a `common` section read by every service, then one per service."""

    sections: Mapping[str, type[BaseSettings]]

    @classmethod
    def of(cls, settings_classes: Iterable[type[BaseSettings]]) -> TidalConfiguration:
        """The configuration of these settings classes, by their `config_section`, in SECTIONS order."""
        found = {getattr(c, "config_section"): c for c in settings_classes}
        unknown = set(found) - set(SECTIONS)
        if unknown:
            raise ValueError(f"settings sections {sorted(unknown)} are not in configuration.SECTIONS")
        return cls({name: found[name] for name in SECTIONS if name in found})

    def models(self) -> dict[str, type[BaseSettings]]:
        """{section: settings class}, `common` first."""
        return {COMMON: common_class(), **self.sections}

    def defaults(self) -> dict[str, dict[str, Any]]:
        """{section: {file key: default}} of every setting the file holds, as JSON values."""
        found = {}
        for section, cls in self.models().items():
            dumped = isolated(cls)().model_dump(mode="json")
            found[section] = {file_key(name): dumped[name] for name in own_fields(cls)}
        return found

    def default_yaml(self) -> str:
        """The full default file: every section, every setting at its
        default, each with its meaning as a comment above it."""
        lines = ["# Tidal's configuration: every setting of every service at its default (`tidal config default`).",
                 "# Point TIDAL_CONFIG (or `tidal run SERVICE --config FILE`) at it; an environment variable",
                 "# still overrides its field. Reference: docs/configuration.md.",
                 f"apiVersion: {API_VERSION}", f"kind: {KIND}"]
        defaults = self.defaults()
        for section, cls in self.models().items():
            lines.append(f"# {_COMMON_TEXT if section == COMMON else _section_text(section)}")
            lines.append(f"{section}:")
            for name in own_fields(cls):
                lines += textwrap.wrap(cls.model_fields[name].description or "", 100, initial_indent="  # ",
                                       subsequent_indent="  # ", break_on_hyphens=False)
                key = file_key(name)
                text = yaml.safe_dump({key: defaults[section][key]}, sort_keys=False, width=1000,
                                      default_flow_style=False, allow_unicode=True)
                lines += ["  " + line for line in text.splitlines()]
        return "\n".join(lines) + "\n"

    def problems(self, document: dict[str, Any]) -> list[str]:
        """What is wrong with a parsed file (`parse_document`'s output): one
        line per problem, each naming the key's path. [] when every service
        would start with it (the environment aside)."""
        found: dict[str, None] = dict.fromkeys(top_level_problems(document))
        for section, cls in self.models().items():
            values, paths, problems = read_section(document, cls, section)
            found.update(dict.fromkeys(problems))
            try:
                isolated(cls)(**values)
            except ValidationError as exc:
                found.update(dict.fromkeys(_located(exc, paths, section)))
        return list(found)

    def check(self, path: Path | str) -> list[str]:
        """`problems` of the file at `path`, each prefixed with the path."""
        try:
            document = parse_yaml(read_bounded(path), path)
        except ConfigurationError as exc:
            return [str(ConfigurationError(path, [p])) for p in exc.problems]
        return [f"{path}: {p}" for p in self.problems(document)]


def _section_text(section: str) -> str:
    return f"`tidal run {section}` (environment: TIDAL_{section.upper()}_…)"


_COMMON_TEXT = "Every service reads these; a service's own section below may set any of them for itself alone."


def _located(exc: ValidationError, paths: dict[str, str], section: str) -> list[str]:
    """Each error of `exc` as `path.in.file: message`."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        where = paths.get(loc[0], f"{section}.{file_key(loc[0])}") if loc else section
        where += "".join(f"[{part}]" for part in loc[1:])
        lines.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
    return lines


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""
