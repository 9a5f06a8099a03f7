"""The ``cenotaph`` command group, its exit codes, and the list of commands.

Exit codes: 0 success; 1 the store refused or failed (forgotten target, stale write, scope
closure, storage or key-provider failure) or the answer is "no" (``read`` found nothing, no request or backup has the id,
``doctor`` found a failing check); 2 bad input (usage errors, malformed scope or value); 130
interrupted by Ctrl-C (the line then says whether anything was written, see ``interrupts``).
Every error is one line on stderr, ``error: <reason>``, never a traceback.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from cenotaph.errors import CenotaphError, InvalidScopeError, InvalidValueError, NotFoundError

from .api_keys import api_keys
from .audit import audit
from .backups import backup, release_backup, restore
from .certificates import attest, verify_cert
from .consumers import consumers
from .demo import demo
from .doctor import doctor
from .export import export
from .forgetting import forget, forget_subject, reauthorize, status
from .initialize import init
from .interrupts import EXIT_INTERRUPTED, Interrupted, interrupted_message
from .interrupts import reset as reset_interrupt
from .keyring import keyring
from .kg_command import kg
from .maintenance import purge, rotate_keys
from .mcp_command import mcp
from .memory import list_records, read, search, write
from .options import check_global_options, global_options
from .progress import stderr_is_tty
from .serve import serve
from .spelling import speak_cli

__all__ = ["COMMANDS", "DEBUG_ENV", "cli", "exit_code_for", "main"]

DEBUG_ENV = "CENOTAPH_DEBUG"  # set to 1 to see the traceback of an unexpected internal error

EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2


def exit_code_for(exc: CenotaphError) -> int:
    """2 for bad input (a malformed scope, value or option), 1 for everything the store refused
    and for an id nothing has (not found)."""
    if isinstance(exc, NotFoundError):
        return EXIT_REFUSED
    return EXIT_BAD_INPUT if isinstance(exc, InvalidScopeError | InvalidValueError) else EXIT_REFUSED


def _fail(reason: str, code: int) -> NoReturn:
    click.echo("error: " + " ".join(speak_cli(reason).split()), err=True)
    sys.exit(code)


# click >= 8.2 raises this (a UsageError holding the whole help text) for a group given no command.
_NO_ARGS_IS_HELP: tuple[type[click.ClickException], ...] = tuple(
    t for t in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if isinstance(t, type)
)


def _os_reason(exc: OSError) -> str:
    """An operating-system refusal, naming the file (a bare "Permission denied" says nothing)."""
    reason = exc.strerror or type(exc).__name__
    if exc.filename is None:
        return reason
    advice = (
        "; check this user's permissions on it"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
        else ""
    )
    return f"{exc.filename}: {reason}{advice}"


def _usage_reason(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if isinstance(exc, click.UsageError) and ctx else ""
    return exc.format_message() + hint


class CenotaphGroup(click.Group):
    """A group whose every failure is one line on stderr with a documented exit code."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        reset_interrupt()
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Interrupted:
            if stderr_is_tty():
                click.echo(err=True)  # off the line where the terminal echoed ^C
            click.echo(interrupted_message(), err=True)
            sys.exit(EXIT_INTERRUPTED)
        except click.ClickException as exc:
            if isinstance(exc, _NO_ARGS_IS_HELP):  # `cenotaph` or `cenotaph audit` alone: show the help
                click.echo(exc.format_message(), err=True)
                sys.exit(exc.exit_code)
            _fail(_usage_reason(exc), exc.exit_code)
        except click.Abort:
            _fail("aborted", EXIT_REFUSED)
        except CenotaphError as exc:
            _fail(str(exc), exit_code_for(exc))
        except BrokenPipeError:
            sys.exit(EXIT_REFUSED)  # the reader went away (e.g. `| head`); nothing left to say
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                sys.exit(EXIT_REFUSED)
            _fail(_os_reason(exc), EXIT_REFUSED)
        except Exception as exc:  # the last line of defence: no traceback, and no message text
            if os.environ.get(DEBUG_ENV):
                raise
            _fail(
                f"internal error ({type(exc).__name__}); please report it "
                f"(set {DEBUG_ENV}=1 to see where it happened)",
                EXIT_REFUSED,
            )
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted from None


@click.group(cls=CenotaphGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cenotaph", prog_name="cenotaph")
@global_options
@click.pass_context
def cli(ctx: click.Context) -> None:
    """cenotaph: a memory store for AI agents whose erasure claims are true statements about bytes.

    Commands print one JSON document on stdout (--table for people). Commands that use a store
    take --data DIR (default $CENOTAPH_DATA, else ./cenotaph-data); create it with `cenotaph init`.
    --data and --table go before or after the command: `cenotaph --data DIR list SCOPE` and
    `cenotaph list SCOPE --data DIR` are the same.
    Exit codes: 0 ok; 1 refused, failed or not found; 2 bad input. Errors are one line on stderr.
    """
    check_global_options(ctx)


# One entry per command; a new command is one module and one line here.
COMMANDS: tuple[click.Command, ...] = (
    demo,
    init,
    write,
    read,
    list_records,
    search,
    forget,
    forget_subject,
    reauthorize,
    status,
    purge,
    attest,
    verify_cert,
    export,
    backup,
    release_backup,
    restore,
    rotate_keys,
    audit,
    doctor,
    keyring,
    serve,
    api_keys,
    consumers,
    mcp,
    kg,
)
for _command in COMMANDS:
    cli.add_command(_command)


def main() -> None:
    """The console-script entry point."""
    cli.main(prog_name="cenotaph")


if __name__ == "__main__":
    main()
