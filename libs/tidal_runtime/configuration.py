"""One configuration file for every service: a `TidalConfiguration`.

    apiVersion: config.tidal.dev/v1alpha1
    kind: TidalConfiguration
    common:      {busUrl: …, logLevel: …}     # every service
    placement:   {gpuStrategy: …, …}          # one section per service

A service reads the file named by `TIDAL_CONFIG` (or `load_settings(cls,
path)`): the `common` section, then its own section, which may also
override a common key for that service alone. Keys are the field names in
camelCase with `_s` spelled `Seconds` (`permit_timeout_s` ->
`permitTimeoutSeconds`). Precedence, highest first: keyword arguments,
environment variables, the file, the defaults. A key the section does not
know, a wrong apiVersion or kind, a section that names no service are
refused with the key's path (`placement.gpuStrategyy: unknown key`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import AliasChoices, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

API_VERSION = "config.tidal.dev/v1alpha1"
KIND = "TidalConfiguration"
ENV_VAR = "TIDAL_CONFIG"
COMMON = "common"
SECTIONS = ("topology", "scoring", "placement", "oversell", "remediation", "bridge", "simulator", "webhook")
"""The services' sections, in pipeline order (each settings class names its
own in `config_section`; a test checks the two agree)."""
MAX_FILE_BYTES = 1 << 20
ENV_ONLY = {"env_only": True}
"""`json_schema_extra` of a field that is not in the file: it differs per
process or per pod (an inherited socket, the node's name, credentials)."""

S = TypeVar("S", bound=BaseSettings)
_FILE: ContextVar[Path | None] = ContextVar("tidal_config_file", default=None)


class ConfigurationError(ValueError):
    """A configuration file Tidal cannot use; `problems` are one line each,
    every one naming the key's path."""

    def __init__(self, path: Path | str, problems: list[str]) -> None:
        super().__init__("; ".join(f"{path}: {p}" if path else p for p in problems))
        self.path = path
        self.problems = problems


def file_key(field_name: str) -> str:
    """The key of a field in the file: `permit_timeout_s` -> `permitTimeoutSeconds`."""
    return to_camel(field_name[:-2] + "_seconds" if field_name.endswith("_s") else field_name)


def env_only(field: FieldInfo) -> bool:
    """Whether the field is set in the environment only, never in the file."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("env_only"))


def file_fields(cls: type[BaseSettings]) -> dict[str, str]:
    """{file key: field name} of every field of `cls` the file may set."""
    return {file_key(name): name for name, field in cls.model_fields.items() if not env_only(field)}


def common_class() -> type[BaseSettings]:
    """ServiceSettings: the fields of the `common` section."""
    from .settings import ServiceSettings  # settings imports this module for its source

    return ServiceSettings


def parse_document(data: bytes | str, where: Path | str) -> dict[str, Any]:
    """The checked top level of a configuration file: a mapping with the
    right apiVersion and kind, known sections only, each a mapping.
    YAML aliases and repeated keys are refused (a repeated key would
    silently lose a setting). ConfigurationError otherwise."""
    document = parse_yaml(data, where)
    problems = top_level_problems(document)
    if problems:
        raise ConfigurationError(where, problems)
    return document


def parse_yaml(data: bytes | str, where: Path | str) -> dict[str, Any]:
    """The YAML mapping in `data`, unchecked but for aliases and repeated
    keys; ConfigurationError when it is not valid YAML or not a mapping."""
    try:
        document = yaml.load(data, Loader=_StrictLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigurationError(where, [f"not valid YAML: {getattr(exc, 'problem', None) or exc}{at}"]) from None
    if not isinstance(document, dict):
        raise ConfigurationError(where, [f"expected a mapping with apiVersion: {API_VERSION} and kind: {KIND}"])
    return document


def top_level_problems(document: dict[str, Any]) -> list[str]:
    """What is wrong with the top level of a parsed file: apiVersion, kind,
    sections that name no service, sections that are not mappings."""
    problems = []
    for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        if document.get(key) != expected:
            got = f"got {document[key]!r}" if key in document else "missing"
            problems.append(f"{key}: expected {expected}, {got}")
    for key, value in document.items():
        if key in ("apiVersion", "kind"):
            continue
        if key not in (COMMON, *SECTIONS):
            problems.append(f"{key}: unknown key{_hint(str(key), (COMMON, *SECTIONS))}")
        elif value is not None and not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping of settings, got {type(value).__name__}")
    return problems


def read_bounded(path: Path | str) -> bytes:
    """The bytes of the file at `path`, refused over 1 MiB; ConfigurationError naming the file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(path, [f"cannot be read: {exc.strerror or exc}"]) from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigurationError(path, [f"over {MAX_FILE_BYTES} bytes"])
    return data


def read_document(path: Path | str) -> dict[str, Any]:
    """`parse_document` of the file at `path`, read bounded (1 MiB)."""
    return parse_document(read_bounded(path), path)


def section_values(document: dict[str, Any], cls: type[BaseSettings], section: str) -> dict[str, Any]:
    """{field name: value} that `document` sets for settings `cls` of
    `section`: `common`, then the section over it. ConfigurationError
    (without a file name) naming every unknown key."""
    values, _, problems = read_section(document, cls, section)
    if problems:
        raise ConfigurationError("", problems)
    return values


def read_section(document: dict[str, Any], cls: type[BaseSettings], section: str) -> tuple[
        dict[str, Any], dict[str, str], list[str]]:
    """({field name: value}, {field name: its key's path}, [problems]) of
    `section_values`, the values of the known keys despite the problems."""
    values: dict[str, Any] = {}
    paths: dict[str, str] = {}
    problems: list[str] = []
    for name, model in ((COMMON, common_class()), *(((section, cls),) if section != COMMON else ())):
        known = file_fields(model)
        elsewhere = {file_key(n) for n, field in model.model_fields.items() if env_only(field)}
        given = document.get(name)
        for key, value in (given if isinstance(given, dict) else {}).items():
            key = str(key)
            if key in known:
                values[known[key]] = value
                paths[known[key]] = f"{name}.{key}"
            elif file_key(key) in elsewhere:
                problems.append(f"{name}.{key}: set in the environment only, not in the file")
            elif file_key(key) in known:
                problems.append(f"{name}.{key}: unknown key (did you mean {file_key(key)}?)")
            else:
                problems.append(f"{name}.{key}: unknown key{_hint(key, known)}")
    return values, paths, problems


class TidalConfigSource(PydanticBaseSettingsSource):
    """The settings a TidalConfiguration file gives one settings class:
    the file of `load_settings`, else the one `TIDAL_CONFIG` names, else none."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads the whole section at once

    def __call__(self) -> dict[str, Any]:
        path = _FILE.get() or os.environ.get(ENV_VAR) or None
        if path is None:
            return {}
        document = read_document(path)
        try:
            values = section_values(document, self.settings_cls, getattr(self.settings_cls, "config_section",
                                                                        COMMON))
        except ConfigurationError as exc:
            raise ConfigurationError(path, exc.problems) from None
        return values


@contextmanager
def config_file(path: Path | str | None) -> Iterator[None]:
    """Settings built inside read the file at `path` (None: `TIDAL_CONFIG`'s)."""
    token = _FILE.set(Path(path) if path is not None else None)
    try:
        yield
    finally:
        _FILE.reset(token)


def load_settings(cls: type[S], path: Path | str | None = None, **overrides: Any) -> S:
    """`cls(**overrides)` reading the configuration file at `path` (None:
    the one `TIDAL_CONFIG` names, if any). ConfigurationError for a file
    Tidal cannot use, or naming the key of a bad value the file gave;
    pydantic's ValidationError for a bad value from elsewhere."""
    with config_file(path):
        try:
            return cls(**overrides)
        except ValidationError as exc:
            where = _FILE.get() or os.environ.get(ENV_VAR)
            if not where:
                raise
            _, paths, _ = read_section(read_document(where), cls, getattr(cls, "config_section", COMMON))
            from_file = {name: key for name, key in paths.items()
                         if name not in overrides and not any(e.upper() in _environ_names() for e in env_names(cls, name))}
            errors = exc.errors(include_url=False)
            if not all(e["loc"] and str(e["loc"][0]) in from_file for e in errors):
                raise  # a bad value from the environment or the arguments: pydantic's error names it
            located = [f"{from_file[str(e['loc'][0])]}: {e['msg'].removeprefix('Value error, ')}" for e in errors]
            raise ConfigurationError(where, located) from None


def env_names(cls: type[BaseSettings], name: str, prefix: str | None = None) -> list[str]:
    """The environment variables that set field `name` of `cls` (`prefix`
    in place of the class's own, e.g. `TIDAL_<SERVICE>_` for a reference)."""
    alias = cls.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        named = [c for c in alias.choices if isinstance(c, str) and c.isupper()]
        if named:
            return named
    return [f"{prefix or cls.model_config.get('env_prefix', '')}{name.upper()}"]


def _environ_names() -> set[str]:  # pydantic-settings matches names case-insensitively
    return {key.upper() for key in os.environ}


def _hint(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without aliases and without repeated keys."""

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted",
                                              self.peek_event().start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"repeated key {str(key)[:60]!r}",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)
