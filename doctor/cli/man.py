"""The man page, strata-doctor(1), made from the click commands themselves: each command's
usage, help and options are the words ``--help`` prints. ``python -m strata_doctor.cli.man
> docs/strata-doctor.1`` writes it; tests/test_man_page.py holds the committed page to a
fresh one, so it cannot drift from the commands."""

from __future__ import annotations

import inspect
import re
import sys
from typing import List, Optional, Tuple

import click

from strata_doctor import __version__

EXIT_CODES: Tuple[Tuple[str, str], ...] = (
    ("0", "Ready: no finding at or above `--fail-on` (default error). `fix` and `report`: done."),
    ("1", "Not ready: at least one finding at or above `--fail-on`. `fix`: applied, but an error "
          "remains."),
    ("2", "Usage or configuration error: a bad option or value, an unknown command, check id or "
          "finding id, a config file, size, `--root` or bundle that cannot be used, an output path "
          "that is refused; one line on standard error names it. `fix`: the plan was refused, "
          "another `fix` holds the lock, or an apply or revert failed or did not finish."),
    ("3", "A check crashed: its row says so and the other checks still ran. Takes precedence over 1."),
    ("130", "Interrupted (SIGINT): no verdict."),
)
"""docs/exit-codes.md, in short; tests/test_man_page.py holds the codes to its table."""

FILES: Tuple[Tuple[str, str], ...] = (
    ("/etc/strata-doctor.yaml", "The engine's settings (`arena:`, `kv:`, `lock:`, `numa:`, "
                                "`workers:`...), read under `--root`; `--config FILE` names "
                                "another, and options override it."),
    ("/etc/systemd/system/UNIT.d/60-strata-doctor-*.conf",
     "The unit drop-ins `fix --apply` writes (with /etc/sysctl.d/60-strata-doctor.conf and "
     "strata.slice); `fix --revert` restores what was there."),
    ("/var/lib/strata-doctor/", "`fix`'s lock and the journal of each apply (`applies/NNNN/`); "
                                "`probe --save` writes probe.json here, which `check` reads."),
)

ENVIRONMENT: Tuple[Tuple[str, str], ...] = (
    ("NO_COLOR", "Set to anything but the empty string: no colour, even on a terminal."),
    ("TERM", "`dumb`: no colour."),
    ("COLUMNS", "The width `--help` wraps its text to (by default the terminal's)."),
    ("STRATA_DOCTOR_SCRIPT", "The script `fix --preflight` writes into the unit's "
                             "`ExecStartPre=`, in place of the running one."),
    ("_STRATA_DOCTOR_COMPLETE", "`bash_source`, `zsh_source` or `fish_source`: print the shell's "
                                "completion script instead of running (docs/cli.md)."),
)

SEE_ALSO = "numactl(8), systemd.resource\\-control(5), systemd\\-oomd(8), lstopo(1)"


def man_page(group: click.Group, name: str = "strata-doctor") -> str:
    """The whole page in roff (man(7) macros)."""
    ctx = click.Context(group, info_name=name, **group.context_settings)
    summary = _paragraphs(group.help or "")[0].rstrip(".")
    lines = [f'.TH {_escape(name.upper())} 1 "" "{_escape(name)} {__version__}" "User Commands"',
             ".SH NAME", f"{_escape(name)} \\- {_escape(summary[:1].lower() + summary[1:])}",
             ".SH SYNOPSIS", _usage(group, ctx),
             ".SH DESCRIPTION", *_text(group.help or ""),
             ".PP", _words(f"Every command prints the words below with `{name} COMMAND --help`; "
                           f"`{name} explain CHECK` prints a check's page."),
             ".SH OPTIONS", *_options(group, ctx), ".SH COMMANDS"]
    for command_name in group.list_commands(ctx):
        command = group.get_command(ctx, command_name)
        if command is not None and not command.hidden:
            lines += _command(command, click.Context(command, info_name=command_name, parent=ctx))
    lines += _table('"EXIT STATUS"', EXIT_CODES, ".B")
    lines += _table("FILES", FILES, ".I")
    lines += _table("ENVIRONMENT", ENVIRONMENT, ".B")
    lines += ['.SH "SEE ALSO"', SEE_ALSO]
    return "\n".join(lines) + "\n"


def _command(command: click.Command, ctx: click.Context) -> List[str]:
    """A command's heading (its usage line), its help and its options."""
    return [f'.SS "{_escape(ctx.command_path)}"', _usage(command, ctx), *_text(command.help or ""),
            *_options(command, ctx)]


def _usage(command: click.Command, ctx: click.Context) -> str:
    """The command's path in bold and its usage pieces in italics: ``[OPTIONS] [CHECK_ID]...``."""
    pieces = " ".join(command.collect_usage_pieces(ctx))
    italic = re.sub(r"[A-Z][A-Z_]+", lambda m: f"\\fI{m.group(0)}\\fR", _escape(pieces))
    return f"\\fB{_escape(ctx.command_path)}\\fR {italic}"


def _options(command: click.Command, ctx: click.Context) -> List[str]:
    """Each option as a tagged paragraph: its names and value, then its help and default."""
    lines: List[str] = []
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden:
            continue
        # Short names first, then long, whatever order a click version keeps them in.
        opts = sorted(param.opts, key=lambda opt: opt.startswith("--")) + list(param.secondary_opts)
        names = ", ".join(f"\\fB{_escape(opt)}\\fR" for opt in opts)
        value = _value(param)
        head = f"{names} \\fI{_escape(value)}\\fR" if value else names
        lines += [".TP", head, _words(" ".join(filter(None, [param.help, _default(param)])))]
    return lines


def _value(param: click.Option) -> Optional[str]:
    """What an option takes: its metavar, ``[a|b]`` of a choice, or its type's name."""
    if param.is_flag or param.count:
        return None
    if param.metavar:
        return param.metavar
    if isinstance(param.type, click.Choice):
        return "[" + "|".join(str(c) for c in param.type.choices) + "]"
    return param.type.name.upper()


def _default(param: click.Option) -> Optional[str]:
    """``[default: x]``, as ``--help`` shows it for an option that shows its default."""
    if isinstance(param.show_default, str):
        return f"[default: {param.show_default}]"
    if param.show_default and not param.is_flag and param.default not in (None, ()):
        return f"[default: {param.default}]"
    return None


def _table(section: str, rows: Tuple[Tuple[str, str], ...], tag: str) -> List[str]:
    """A section of tagged paragraphs: each key (bold or italic) over its words."""
    lines = [f".SH {section}"]
    for key, words in rows:
        lines += [".TP", f"{tag} {_escape(key)}", _words(words)]
    return lines


def _paragraphs(help_text: str) -> List[str]:
    """A help text's paragraphs as click reads them: cleaned, up to a ``\\f``."""
    text = inspect.cleandoc(help_text).split("\f", 1)[0]
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def _text(help_text: str) -> List[str]:
    """A help text as roff paragraphs; a ``\\b`` paragraph keeps its lines, as in ``--help``."""
    lines: List[str] = []
    for paragraph in _paragraphs(help_text):
        if paragraph.startswith("\b"):
            kept = paragraph[1:].strip("\n").splitlines()
            lines += [".PP", ".nf", *(_escape(line) for line in kept), ".fi"]
        else:
            lines += [".PP", _words(" ".join(paragraph.split()))]
    return lines


def _words(text: str) -> str:
    """Running text: escaped, with ``code`` in bold."""
    return re.sub(r"`([^`]+)`", r"\\fB\1\\fR", _escape(text))


def _escape(text: str) -> str:
    """Text roff prints as it is: backslashes and hyphens escaped (an option's ``-`` stays a
    minus sign to copy), no line starting as a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n"))


if __name__ == "__main__":
    from strata_doctor.cli import main

    sys.stdout.write(man_page(main))
