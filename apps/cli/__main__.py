"""`computedomain`: the operator's CLI (demo, plan, preflight, webhook)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from apps.cli import demo, plan, preflight, webhook


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="computedomain", description="NVIDIA ComputeDomain DRA driver: tools."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="driver logs to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    demo.add_parser(sub)
    plan.add_parser(sub)
    preflight.add_parser(sub)
    webhook.add_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    code: int = args.run(args, env=os.environ)
    return code


if __name__ == "__main__":
    sys.exit(main())
