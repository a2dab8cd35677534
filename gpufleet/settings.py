"""Flags and environment variables for every daemon, from one pydantic-settings class each.

A settings field declares its flags (`flags=[...]`), its env var (`validation_alias`) and its
`--help` group; this module turns the class into an argparse parser and back, so a flag, its
env var and its default can never drift apart. Precedence: flag > env var > default.
"""

import argparse
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gpufleet import __version__
from gpufleet.core.messages import did_you_mean, shown
from gpufleet.core.urls import check_http_url

S = TypeVar("S", bound=BaseSettings)


class SettingsError(ValueError):
    """A flag or env var has a bad value; the message names it."""


def setting(
    default: Any,
    env: str | AliasChoices | None,
    *flags: str,
    group: str,
    help: str,
    repeat: bool = False,
    empty_env_unset: bool = False,
    **kw: Any,
) -> Any:
    """A settings field with its flags, env var and --help group, for `build_parser`.

    `env` is the env var's name, AliasChoices for several (tried in order; `--help` and
    error messages then name none, so say them in `help`), or None for no env var. No flags
    makes the field env-only (absent from the parser, listed in `markdown_table`). `help` is
    the field's description and its --help text; `repeat` lets a string flag repeat, its
    values joined with commas (urfave/cli's string slices); `empty_env_unset` reads an empty
    env var as unset, as urfave/cli reads an int slice's (a number's always is); `kw` passes
    constraints (gt, ge, ...) on to pydantic's Field.
    """
    extra = {"flags": list(flags), "group": group, "repeat": repeat}
    if empty_env_unset:
        extra["empty_env_unset"] = True
    return Field(default, validation_alias=env, description=help, json_schema_extra=extra, **kw)


def _flags(info: FieldInfo) -> list[str]:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return list(extra.get("flags", []))


def _repeats(info: FieldInfo) -> bool:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return bool(extra.get("repeat"))


def _empty_env_unset(info: FieldInfo) -> bool:
    """An empty env var leaves the field unset: urfave/cli skips an empty value for its
    number and int-slice flags (`DCGM_EXPORTER_INTERVAL=` keeps the default)."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    types = _types(info)
    number = any(t in (int, float) for t in types) and bool not in types
    return number or bool(extra.get("empty_env_unset"))


def _types(info: FieldInfo) -> tuple[Any, ...]:
    """The field's type, or the members of its union (`Path | None`)."""
    ann = info.annotation
    return get_args(ann) if get_origin(ann) is not None else (ann,)


def _group(info: FieldInfo) -> str:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return str(extra.get("group", "options"))


def _env_names(info: FieldInfo) -> list[str]:
    """The env var(s) a field reads: one name, or several accepted alternatives."""
    alias = info.validation_alias
    if isinstance(alias, str):
        return [alias]
    if isinstance(alias, AliasChoices):
        return [c for c in alias.choices if isinstance(c, str)]
    return []


class ScalarEnvSource(PydanticBaseSettingsSource):
    """pydantic-settings' env source, for settings whose fields are all scalars (str, int,
    float, bool, Path, Literal, X | None) under the config every command uses
    (`CommandSettings`: case-insensitive names, no prefix, no .env file), reading each
    field's own env var names only.

    It gives what `EnvSettingsSource` gives for such a class (tested against it) but for
    one thing: that source also reads a field by its field name (`populate_by_name`, which
    the flags need), so `DEBUG`, `ADDRESS`, `SEED` or `JOBS`, set in a container or a CI job
    for something else, turned on debug logging, moved a listener or failed a command on a
    setting no `--help` names. Per field: the first of its env var names set in the
    environment in any case, keyed by the first name, the value as the string it is.
    `EnvSettingsSource` also asks of each field's type whether it is a model, mapping or
    sequence, with `issubclass` against collections.abc; the answers stay in the ABCs'
    caches, 0.2 MiB for the exporter's 45 fields (BENCHMARKS.md, issue 15).
    """

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._lookup(_lower_environ(), field, field_name)

    @staticmethod
    def _lookup(
        environ: Mapping[str, str], field: FieldInfo, field_name: str
    ) -> tuple[str | None, str, bool]:
        names = _env_names(field)
        for name in names:
            value = environ.get(name.lower())
            if value == "" and _empty_env_unset(field):
                continue
            if value is not None:
                return value, names[0], False
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        environ = _lower_environ()
        data = {}
        for name, info in self.settings_cls.model_fields.items():
            value, key, _ = self._lookup(environ, info, name)
            if value is not None:
                data[key] = value
        return data


# The longest duration a `*_seconds` or `*_ms` setting takes. Longer is a typo (a unit, an
# exponent): a thread's wait overflows near 9.2e9 s, which killed the exporter's collector
# and pod-resources threads while the daemon served its first snapshot on.
MAX_DURATION_SECONDS = 86400.0


class CommandSettings(BaseSettings):
    """What every command's settings share: flags and env vars only (`ScalarEnvSource`),
    the field names accepted as keyword arguments (the parsed flags come in by name), no
    unknown keys, no inf or nan, and durations of at most a day."""

    # allow_inf_nan: a duration or rate of inf or nan is a typo, never a setting.
    model_config = SettingsConfigDict(populate_by_name=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _empty_path(cls, value: Any, info: ValidationInfo) -> Any:
        """An empty path is no file where none may be given (as dcgm-exporter reads an
        empty web config: a chart templating `""` for it), else an error: Path("") is
        ".", which became "Is a directory: '.'" or a socket path of "."."""
        if value != "" or info.field_name is None:
            return value
        types = _types(cls.model_fields[info.field_name])
        if Path not in types:
            return value
        if type(None) in types:
            return None
        raise ValueError("must not be empty")

    @field_validator("*", mode="before")
    @classmethod
    def _go_bool(cls, value: Any, info: ValidationInfo) -> Any:
        """A boolean env var reads as urfave/cli reads it: Go's ParseBool, and empty is
        false. pydantic took "yes" and "on" (a manifest NVIDIA's daemons then refuse), and
        refused the empty value a chart templates."""
        if not isinstance(value, str) or not _is_bool(cls.model_fields[info.field_name or ""]):
            return value
        if value == "":
            return False
        if value not in _GO_BOOLS:
            raise ValueError(f"not a boolean ({_GO_BOOL_HINT})")
        return _GO_BOOLS[value]

    @field_validator("*")
    @classmethod
    def _http_url(cls, value: Any, info: ValidationInfo) -> Any:
        """A `*_url` setting is empty (unset) or an http(s) URL (`check_http_url`)."""
        if (info.field_name or "").endswith("_url") and value != "":
            check_http_url(value)
        return value

    @field_validator("*")
    @classmethod
    def _at_most_a_day(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        unit = "ms" if name.endswith("_ms") else "s" if name.endswith("_seconds") else ""
        limit = MAX_DURATION_SECONDS * (1000.0 if unit == "ms" else 1.0)
        if unit and isinstance(value, int | float) and value > limit:
            raise ValueError(f"must be at most {limit:.0f} {unit} (a day)")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, as pydantic-settings' default order (no .env
        file or secrets dir is configured)."""
        return init_settings, ScalarEnvSource(settings_cls)


def _lower_environ() -> dict[str, str]:
    """The environment keyed by lowercased names: env names match in any case."""
    return {key.lower(): value for key, value in os.environ.items()}


def _env_name(info: FieldInfo) -> str | None:
    names = _env_names(info)
    return names[0] if names else None


def _env_set(info: FieldInfo) -> str | None:
    """The env var the field's value came from, as the environment spells it; None if unset."""
    environ = {key.lower(): key for key in os.environ}
    return next((environ[n.lower()] for n in _env_names(info) if n.lower() in environ), None)


def _is_bool(info: FieldInfo) -> bool:
    return bool in _types(info)


# Go's strconv.ParseBool, which urfave/cli uses for flags and env vars alike: these
# spellings only (not "yes", "on" or "tRUE").
_GO_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}
_GO_BOOL_HINT = "use true, false, t, f, 1 or 0; TRUE, True, T, FALSE, False and F too"


class BoolAction(argparse.Action):
    """A boolean flag in urfave/cli's forms (dcgm-exporter's CLI library) plus `--no-FLAG`.

    `--flag` and `-f` set True; `--flag=VALUE` and `-f=VALUE` take what Go's ParseBool
    does (true, false, t, f, 1 or 0; TRUE, True, T and their false forms); `--no-flag`
    sets False and takes no value. A value given as the next word (`--flag false`) is taken
    too: urfave/cli would set True and ignore that word, which contradicts what the word
    says. Any other value is an error naming the flag.
    """

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        default: Any = None,
        required: bool = False,
        help: str | None = None,
    ) -> None:
        self.negations = tuple(f"--no-{o[2:]}" for o in option_strings if o.startswith("--"))
        super().__init__(
            option_strings=[*option_strings, *self.negations],
            dest=dest,
            nargs="?",
            default=default,
            required=required,
            help=help,
            metavar="BOOL",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if option_string in self.negations:
            if values is not None:
                raise argparse.ArgumentError(
                    None, f"invalid flag {option_string}: takes no value (got {values!r})"
                )
            setattr(namespace, self.dest, False)
            return
        if values is None:
            setattr(namespace, self.dest, True)
            return
        value = _GO_BOOLS.get(str(values))
        if value is None:
            raise argparse.ArgumentError(
                None, f"invalid flag {option_string}: {values!r} is not a boolean ({_GO_BOOL_HINT})"
            )
        setattr(namespace, self.dest, value)


class JoinAction(argparse.Action):
    """A string flag that may be repeated, as urfave/cli's string slices: every value is
    kept, joined with commas (`--x a --x b,c` is `a,b,c`)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        previous = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, values if previous is None else f"{previous},{values}")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, printed first: the problem, a
    did-you-mean for a mistyped flag, and where the usage is; not 20-40 lines of usage
    with the one useful line at the bottom. Exits 2, as argparse does."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            flag = next((e.partition("=")[0] for e in extras if e.startswith("-")), "")
            flags = [o for action in self._actions for o in action.option_strings]
            hint = did_you_mean(flag, flags) if flag else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}; run '{self.prog} --help' for usage\n")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows a boolean as `-k, --kubernetes[=BOOL], --no-kubernetes`."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not isinstance(action, BoolAction):
            return super()._format_action_invocation(action)
        return ", ".join(
            o if o in action.negations or not o.startswith("--") else f"{o}[=BOOL]"
            for o in action.option_strings
        )


def build_parser(
    settings_cls: type[BaseSettings], *, prog: str, description: str
) -> argparse.ArgumentParser:
    """An argparse parser with one option per settings field that declares flags.

    Defaults are suppressed so that only flags actually given override env vars. Booleans
    use `BoolAction`, repeatable strings `JoinAction`. `--version` prints the version.
    """
    parser = OneLineParser(
        prog=prog, description=description, allow_abbrev=False, formatter_class=_HelpFormatter
    )
    # -v as urfave/cli's built-in version flag, which both NVIDIA daemons have
    parser.add_argument("-v", "--version", action="version", version=f"{prog} {__version__}")
    groups: dict[str, argparse._ArgumentGroup] = {}
    env_only: list[str] = []
    for name, info in settings_cls.model_fields.items():
        flags = _flags(info)
        if not flags:
            if _env_names(info):
                env_only.append(_env_only_help(info))
            continue
        group = groups.setdefault(_group(info), parser.add_argument_group(_group(info)))
        env = " or ".join(_env_names(info))
        help_text = (info.description or "").replace("%", "%%")
        help_text += f" [env {env}]" if env else ""
        help_text += _default_note(info).replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": help_text}
        if _is_bool(info):
            kwargs["action"] = BoolAction
        else:
            kwargs["metavar"] = name.upper()
            if _repeats(info):
                kwargs["action"] = JoinAction
        group.add_argument(*flags, **kwargs)
    if env_only:  # argparse lists options only: these would be missing from --help
        parser.epilog = "settings with no flag, set by env var only:\n" + "\n".join(env_only)
    return parser


def _default_note(info: FieldInfo) -> str:
    """` (default: X)` for --help, or "" for a default not worth showing: none, empty or
    off (not 0, which equals False)."""
    default = info.get_default(call_default_factory=True)
    if default is None or default is False or default == "":
        return ""
    return f" (default: {default})"


def _env_only_help(info: FieldInfo) -> str:
    text = f"{' or '.join(_env_names(info))}: {info.description or ''}{_default_note(info)}"
    return textwrap.fill(text, width=79, initial_indent="  ", subsequent_indent="      ")


def load_settings(
    settings_cls: type[S], parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> S:
    """Parse flags, then let pydantic-settings fill the rest from env vars and defaults.

    A long flag may be given with one dash (`-mig-strategy=mixed`), as Go's flag package,
    which urfave/cli uses, allows. Raises SettingsError naming the flag or env var whose
    value is invalid.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    given = vars(parser.parse_args(_single_dash_long(settings_cls, args)))
    try:
        return settings_cls(**given)
    except ValidationError as exc:
        raise SettingsError(_describe(settings_cls, exc, given)) from None


def _single_dash_long(settings_cls: type[BaseSettings], argv: list[str]) -> list[str]:
    """Go's flag package, which urfave/cli uses, takes any flag with one dash or two. So
    `-name[=v]` is read as `--name[=v]` where `--name` is a flag and `-name` is not (the
    exporter's `-rbmn` and `-k` keep their meaning), and `--f[=v]` as `-f[=v]` where `-f`
    is a flag and `--f` is not; nothing after `--` is touched."""
    flags = {f for info in settings_cls.model_fields.values() for f in _flags(info)}
    flags |= {f"--no-{f[2:]}" for f in flags if f.startswith("--")} | {"--version", "--help"}
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return out + argv[i:]
        name = arg.split("=", 1)[0]
        if name in flags or not arg.startswith("-"):
            out.append(arg)
        elif not arg.startswith("--") and "-" + name in flags:
            out.append("-" + arg)
        elif arg.startswith("--") and name[1:] in flags:
            out.append(arg[1:])
        else:
            out.append(arg)
    return out


def _describe(settings_cls: type[BaseSettings], exc: ValidationError, given: dict) -> str:
    lines = []
    for err in exc.errors():
        loc = str(err["loc"][0]) if err["loc"] else "?"
        info = settings_cls.model_fields.get(loc)
        if info is None:  # pydantic reports env-sourced errors under the alias
            info = next(
                (i for i in settings_cls.model_fields.values() if _env_name(i) == loc), None
            )
            name = next((n for n, i in settings_cls.model_fields.items() if i is info), loc)
        else:
            name = loc
        if name in given and info is not None and _flags(info):
            where = f"flag {_flags(info)[-1]}"
        elif info is not None and (env := _env_set(info)):
            where = f"env var {env}"
        else:
            where = f"setting {name}"
        lines.append(f"invalid {where}: {_message(err)}")
    return "; ".join(lines)


def _message(err: Any) -> str:
    """One pydantic error as the validator worded it (without pydantic's "Value error, "
    in front), and the value it got, bounded."""
    error = (err.get("ctx") or {}).get("error") if err["type"] == "value_error" else None
    message = str(error) if error is not None else err["msg"]
    return f"{message} (got {shown(err.get('input'))})"


def describe_validation_error(exc: ValidationError, *, flags: Mapping[str, str]) -> str:
    """A ValidationError of settings a command built from its own flags, as one line naming
    the flag `flags` maps each field to (or the field)."""
    return "; ".join(
        f"invalid {flags.get(str(err['loc'][0]), str(err['loc'][0])) if err['loc'] else '?'}: "
        f"{_message(err)}"
        for err in exc.errors()
    )


def settings_from_argv(
    settings_cls: type[S], *, prog: str, description: str, argv: Sequence[str] | None
) -> S:
    """A daemon's settings from its command line and environment. A bad flag or env var
    is printed the way argparse prints errors, and the process exits 2."""
    parser = build_parser(settings_cls, prog=prog, description=description)
    try:
        return load_settings(settings_cls, parser, argv)
    except SettingsError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def markdown_table(settings_cls: type[BaseSettings]) -> str:
    """The settings as a Markdown table (flag, env var, default, meaning) for the README."""
    rows = ["| flag | env var | default | meaning |", "|---|---|---|---|"]
    for info in settings_cls.model_fields.values():
        flags = ", ".join(f"`{f}`" for f in _flags(info))
        default = info.get_default(call_default_factory=True)
        default_text = "" if default in (None, "") else f"`{default}`"
        meaning = (info.description or "").replace("|", "\\|")
        env = " / ".join(f"`{n}`" for n in _env_names(info))
        rows.append(f"| {flags} | {env} | {default_text} | {meaning} |")
    return "\n".join(rows) + "\n"
