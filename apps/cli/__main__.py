"""`computedomain`: the operator's CLI (demo, plan, preflight, webhook).

Global options (before the subcommand): `-v/--verbose` shows the driver's log lines at
verbosity 2, `--log-verbosity N` at N; without either only errors are logged (the tools print
their own narrative). `webhook` is a server: its log is its output, at its own
`--log-verbosity` (env LOG_VERBOSITY, default 2).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType

from apps.cli import demo, plan, preflight, webhook
from apps.shell import flags

SUBCOMMANDS: dict[str, ModuleType] = {
    "demo": demo, "plan": plan, "preflight": preflight, "webhook": webhook,
}

USAGE = """Usage: computedomain [-v | --log-verbosity N] COMMAND [OPTIONS]

  NVIDIA ComputeDomain DRA driver: tools. `computedomain COMMAND --help` explains each.

Options:
  -v, --verbose          the driver's log lines on stderr (verbosity 2)
  --log-verbosity N      the driver's log lines at verbosity N (see docs/operations.md)
  -h, --help             Show this message and exit.

Commands:
"""


def _usage() -> str:
    lines = [USAGE]
    for name, module in SUBCOMMANDS.items():
        summary = (module.COMMAND.help or "").split(". ")[0].rstrip(".")
        lines.append(f"  {name:<10} {summary}\n")
    return "".join(lines)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if env is None else env
    verbosity: int | None = None
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option in ("-h", "--help"):
            print(_usage(), end="")
            return 0
        if option in ("-v", "--verbose"):
            verbosity = max(verbosity or 0, 2)
        elif option == "--log-verbosity" or option.startswith("--log-verbosity="):
            text = option.partition("=")[2] if "=" in option else (args.pop(0) if args else "")
            value = flags.WHOLE.parse(text)
            if not isinstance(value, int):
                flags.fail(f"--log-verbosity must be {flags.WHOLE.what}, got {text!r}")
            verbosity = value
        else:
            flags.fail(f"no such option {option!r} before the command (see --help)")
    if not args:
        flags.fail("a command is required: " + ", ".join(SUBCOMMANDS) + " (see --help)")
    name, rest = args[0], args[1:]
    module = SUBCOMMANDS.get(name)
    if module is None:
        flags.fail(f"no such command {name!r}: use one of {', '.join(SUBCOMMANDS)}")
    code: int = module.main(rest, env=environ, verbosity=verbosity)
    return code


if __name__ == "__main__":
    sys.exit(main())
