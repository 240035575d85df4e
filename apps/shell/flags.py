"""Typed flags, each with its environment variable, parsed by click; one-line errors, exit 2.

Why click: it types and range-checks every value, names each flag's env var in `--help`
(`show_envvar`) and reports bad usage as an exception we format ourselves, so five settings
modules need no hand-written conversion code. We read env vars from a mapping handed in (the
process environment in production, a dict in tests) instead of `os.environ`.

NB: an env var set to "" is a value, parsed by the flag's type like any other (click itself
treats it as unset); options made with `empty_is_unset=True` fall back to their default.
CLIQUE_ID="" must stay a value: it means "this node has no fabric".
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import click

from apps.shell import logs

# --------------------------------------------------------------------------- types


class ValueType(click.ParamType):  # type: ignore[type-arg]
    """A click type whose failures read "must be <what>, got '<text>'"; `parse` returns
    INVALID for text it refuses."""

    what = "a value"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        result = self.parse(value.strip())
        if result is INVALID:
            self.fail(f"must be {self.what}, got {value!r}", param, ctx)
        return result

    def parse(self, text: str) -> Any:
        raise NotImplementedError


# What `ValueType.parse` returns for text it refuses.
INVALID = object()


class WholeNumber(ValueType):
    name = "integer"

    def __init__(self, *, minimum: int = 0) -> None:
        self.minimum = minimum
        self.what = f"a whole number of at least {minimum}" if minimum != 1 else (
            "a whole number above 0")

    def parse(self, text: str) -> Any:
        try:
            value = int(text)
        except ValueError:
            return INVALID
        return value if value >= self.minimum else INVALID


class Seconds(ValueType):
    """A finite number of seconds above 0."""

    name = "seconds"
    what = "a number of seconds above 0"

    def parse(self, text: str) -> Any:
        try:
            value = float(text)
        except ValueError:
            return INVALID
        return value if value > 0 and math.isfinite(value) else INVALID


class Port(ValueType):
    """A TCP port; "" or 0 turns the listener off (None)."""

    name = "port"
    what = "a port number from 1 to 65535, or 0 for off"

    def parse(self, text: str) -> Any:
        if text in ("", "0"):
            return None
        try:
            value = int(text)
        except ValueError:
            return INVALID
        return value if 0 < value <= 65535 else INVALID


class Boolean(ValueType):
    name = "boolean"
    what = "true or false"
    _TRUE = frozenset({"true", "1", "yes", "on"})
    _FALSE = frozenset({"false", "0", "no", "off"})

    def parse(self, text: str) -> Any:
        lowered = text.lower()
        if lowered in self._TRUE:
            return True
        if lowered in self._FALSE:
            return False
        return INVALID


class OneOf(ValueType):
    name = "choice"

    def __init__(self, *choices: str) -> None:
        self.choices = choices
        self.what = "one of " + ", ".join(choices)

    def parse(self, text: str) -> Any:
        return text if text in self.choices else INVALID


class Text(ValueType):
    name = "text"

    def parse(self, text: str) -> Any:
        return text


class OptionalText(ValueType):
    """Text where "" means "not given" (None)."""

    name = "text"

    def parse(self, text: str) -> Any:
        return text or None


WHOLE_ABOVE_0 = WholeNumber(minimum=1)
WHOLE = WholeNumber(minimum=0)
SECONDS = Seconds()
PORT = Port()
BOOLEAN = Boolean()
TEXT = Text()
OPTIONAL_TEXT = OptionalText()


# --------------------------------------------------------------------------- options


class _EnvOption(click.Option):
    """An option whose env vars come from the mapping the command was parsed with."""

    def __init__(
        self, param_decls: list[str], *, env_names: tuple[str, ...], empty_is_unset: bool,
        **kw: Any
    ) -> None:
        super().__init__(param_decls, envvar=list(env_names) or None,
                         show_envvar=bool(env_names), **kw)
        self.env_names = env_names
        self.empty_is_unset = empty_is_unset

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        env = _environment(ctx)
        for name in self.env_names:
            value = env.get(name)
            if value is not None and (value or not self.empty_is_unset):
                return value
        return None


def option(
    *names: str,
    env: str | Sequence[str] = (),
    help: str,
    type: click.ParamType[Any, Any] = TEXT,
    default: object = None,
    empty_is_unset: bool = False,
    show_default: bool | str = True,
) -> click.Option:
    """One flag: `names` (canonical first, then old aliases), its env var(s), type and help.

    `default` is a string parsed by `type` like any user input (so `--help` shows it as typed).
    """
    env_names = (env,) if isinstance(env, str) else tuple(env)
    return _EnvOption(
        list(names), env_names=env_names, empty_is_unset=empty_is_unset, type=type,
        default=default, help=help, show_default=show_default if default is not None else False,
    )


def argument(name: str, *, nargs: int = 1, required: bool = True,
             type: click.ParamType[Any, Any] = TEXT) -> click.Argument:
    return click.Argument([name], nargs=nargs, required=required, type=type)


def command(name: str, *, help: str, params: Sequence[click.Parameter]) -> click.Command:
    return click.Command(
        name, params=list(params), help=help, add_help_option=True,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100,
                          "terminal_width": 100},
    )


# The options every binary spells the same way.


def verbosity(*, default: str = "2") -> click.Option:
    return option(
        "--log-verbosity", "-v", env="LOG_VERBOSITY", type=WHOLE, default=default,
        help="; ".join(f"{level}: {meaning}" for level, meaning in logs.SCALE),
    )


def feature_gates() -> click.Option:
    return option("--feature-gates", env="FEATURE_GATES", default="",
                  help='feature gates, e.g. "HostManagedIMEXDaemon=true,MPSSupport=false"')


def imex_mode(*, default: str = "") -> click.Option:
    return option("--imex-mode", "--mode", env="IMEX_MODE", default=default,
                  help="IMEX mode: driverManaged or hostManaged (empty: driverManaged)")


def imex_isolation() -> click.Option:
    return option("--imex-isolation", "--isolation", env="IMEX_ISOLATION", default="",
                  help="isolation between ComputeDomains: domain, or under hostManaged channel "
                  "or none (empty: domain under driverManaged, channel under hostManaged)")


def node_name(*, help: str) -> click.Option:
    return option("--node-name", env="NODE_NAME", default="", help=help)


def nvidia_driver_root(*, help: str) -> click.Option:
    return option("--nvidia-driver-root", env="NVIDIA_DRIVER_ROOT", default="/", help=help)


def imex_channels_max() -> click.Option:
    return option("--imex-channels-max", "--channels-max", env="IMEX_CHANNELS_MAX", type=WHOLE,
                  default="2048",
                  help="channel isolation: channel IDs 1..max-1 are given to ComputeDomains")


def namespace(*, env: str | Sequence[str] = "NAMESPACE") -> click.Option:
    return option("--namespace", env=env, default="nvidia-dra-driver",
                  help="the driver's namespace (daemon objects, cliques, leases)")


def kubeconfig() -> click.Option:
    return option("--kubeconfig", env="KUBECONFIG", type=OPTIONAL_TEXT,
                  help="kubeconfig file; unset: the pod's service account, else ~/.kube/config")


def metrics_port(*, default: str = "0") -> click.Option:
    return option("--metrics-port", env="METRICS_PORT", type=PORT, default=default,
                  help="Prometheus /metrics port (0: off)")


def health_port(*, default: str) -> click.Option:
    return option("--health-port", env="HEALTH_PORT", type=PORT, default=default,
                  help="health port for the probes (0: off)")


# --------------------------------------------------------------------------- parsing


def _environment(ctx: click.Context) -> Mapping[str, str]:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Mapping) else os.environ


def parse(
    cmd: click.Command, argv: Sequence[str] | None, env: Mapping[str, str]
) -> dict[str, Any]:
    """The command's values by parameter name; `--help` exits 0, bad input exits 2 in one line."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with cmd.make_context(_prog(cmd), args, obj=env) as ctx:
            return dict(ctx.params)
    except click.exceptions.Exit as done:
        raise SystemExit(done.exit_code) from None
    except click.exceptions.Abort:
        raise SystemExit(1) from None
    except click.ClickException as exc:
        fail(describe(exc))


def parse_namespace(
    cmd: click.Command, argv: Sequence[str] | None, env: Mapping[str, str]
) -> argparse.Namespace:
    """`parse`, as attributes (what the CLI's subcommands take)."""
    return argparse.Namespace(**parse(cmd, argv, env))


def _prog(cmd: click.Command) -> str:
    return cmd.name or "command"


def describe(exc: click.ClickException) -> str:
    """One line: which flag (and env var) is wrong, and what it must be."""
    if isinstance(exc, click.MissingParameter) and exc.param is not None:
        choices = getattr(exc.param.type, "choices", None)
        hint = f" ({' or '.join(choices)})" if choices else ""
        return f"{_flag_name(exc.param)} is required{hint} (see --help)"
    if isinstance(exc, click.BadParameter) and exc.param is not None:
        return f"{_flag_name(exc.param)} {exc.message}".replace("\n", " ")
    message = exc.format_message().replace("\n", " ")
    if isinstance(exc, click.NoSuchOption | click.BadOptionUsage | click.UsageError):
        return f"{message} (see --help)"
    return message


def _flag_name(param: click.Parameter) -> str:
    if isinstance(param, _EnvOption):
        flag = param.opts[0]
        if param.env_names:
            return f"{flag} (env {' or '.join(param.env_names)})"
        return flag
    if isinstance(param, click.Option):
        return param.opts[0]
    return (param.name or "argument").upper()


def fail(message: str) -> NoReturn:
    """Bad configuration: one line on stderr, exit code 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def exit_quietly_on_broken_pipe(write: Callable[[], None]) -> int:
    """Run `write`; a reader that went away (`| head`) ends the process quietly, exit 0."""
    try:
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        # NB: Python would print a second BrokenPipeError at exit while flushing stdout.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0
