"""The ``docpc`` command line: builds the parser from the command modules and runs one command.

Exit codes (see :mod:`docpc_retrievers.cli.common`): 0 success; 3 some files
failed and the rest were done; 2 usage errors; 1 fatal errors. A library
error prints its message; anything unexpected prints one line naming the
exception (``-v`` shows the traceback). No command ever dumps a raw traceback.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn
from importlib import import_module

from docpc_retrievers import __version__
from docpc_retrievers.cli.common import EXIT_FATAL, EXIT_USAGE, UsageError
from docpc_retrievers.errors import DocPCError, InvalidFilterError, InvalidMetadataError, SourceRootError

__all__ = ["build_parser", "main"]

logger = logging.getLogger("docpc_retrievers.cli")

#: Command modules, in help order; each has ``register(subparsers)`` and sets ``func`` on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "docpc_retrievers.cli.index",
    "docpc_retrievers.cli.search",
    "docpc_retrievers.cli.serve",
    "docpc_retrievers.cli.show",
    "docpc_retrievers.cli.store",
    "docpc_retrievers.cli.meta",
    "docpc_retrievers.cli.eval",
    "docpc_retrievers.cli.train",
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line and a pointer to ``--help``, not the whole usage first."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n(see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``docpc`` argument parser with every command registered."""
    parser = _Parser(
        prog="docpc",
        description="Document-level visual retrieval over PDFs (representative pages composed into one grid).",
    )
    parser.add_argument("--version", action="version", version=f"docpc-retrievers {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for module in COMMAND_MODULES:
        import_module(module).register(sub)
    parser.set_defaults(commands=sub.choices)
    return parser


def _unrecognized(extras: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """argparse's message for unknown arguments, with the nearest option of the command for each unknown one."""
    options = [s for action in parser._actions for s in action.option_strings]
    hints = []
    for extra in extras:
        if extra.startswith("-"):
            near = difflib.get_close_matches(extra.split("=", 1)[0], options, n=1, cutoff=0.8)
            if near:
                hints.append(f"did you mean {near[0]} for {extra.split('=', 1)[0]}?")
    return f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")


def _quiet_peer_notices(record: logging.LogRecord) -> bool:
    """Drop colpali-engine's import-time advice to install FastPlaid (logged on the root logger, so no logger name
    can silence it): docpc-retrievers never uses FastPlaid."""
    return not (record.name == "root" and str(record.msg).startswith("FastPlaid is not installed"))


def _setup_logging(verbose: int) -> None:
    progress = logging.getLogger("docpc_retrievers.progress")  # model loading and totals: shown without -v
    if not progress.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("docpc: %(message)s"))
        progress.addHandler(handler)
    progress.setLevel(logging.INFO)
    progress.propagate = False
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    # force=True: importing colpali-engine may already have attached a root handler.
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr, force=True)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_quiet_peer_notices)
    if verbose < 2:
        for noisy in ("chromadb", "httpx", "transformers", "urllib3", "huggingface_hub"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
        # transformers draws "Loading weights" bars on every model load; ours is the only bar.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


#: What a shell reports for a command ended by SIGPIPE (128 + 13).
EXIT_BROKEN_PIPE = 141


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``docpc``; returns the exit code."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    command = args.commands.get(args.command, parser)  # errors print the command's own usage
    if extras:
        command.error(_unrecognized(extras, command))
    verbose = int(getattr(args, "verbose", 0) or 0)
    _setup_logging(verbose)
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    try:
        return int(args.func(args))
    except UsageError as exc:
        command.error(str(exc))
    except (InvalidFilterError, InvalidMetadataError, SourceRootError) as exc:  # the user's input, found after parsing
        print(f"docpc: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except DocPCError as exc:
        print(f"docpc: {exc}", file=sys.stderr)
    except BrokenPipeError:  # `docpc list | head`: the reader left; end quietly, as a pipeline expects
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("docpc: interrupted; committed documents are kept, re-run the same command to finish", file=sys.stderr)
        return 130
    except Exception as exc:  # anything unexpected: one line, the traceback only with -v
        if verbose:
            logger.exception("unexpected error")
        print(f"docpc: unexpected {type(exc).__name__}: {exc} (run with -v for details)", file=sys.stderr)
    return EXIT_FATAL


if __name__ == "__main__":
    sys.exit(main())
