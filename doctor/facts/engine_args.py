"""The engine's command line, read for the model it serves: the model's path, the context
length and the K/V cache type, as the engine's own flags say them (llama.cpp's
``--model``/``-m``, ``--ctx-size``/``-c``, ``--cache-type-k``/``-ctk``; vLLM's
``--max-model-len``; ktransformers' ``--model_path``/``--gguf_path``, ``--max_seq_len``).

The command line is the unit's ``ExecStart=`` in effect (its file and drop-ins merged),
else the running engine's ``/proc/PID/cmdline``; a relative path is relative to the
unit's ``WorkingDirectory=`` or the process's ``/proc/PID/cwd``. The parser is pure
(:func:`parse_engine_args`), tested on strings.
"""

from __future__ import annotations

import posixpath
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

from strata_doctor.facts.unitfile import split_command
from strata_doctor.facts.units import unit_settings
from strata_doctor.root import Root

MODEL_FLAGS = ("--gguf-path", "--gguf_path", "--model", "-m", "--model-path", "--model_path")
"""The flags that name the model, the first found winning: ktransformers' ``--gguf_path``
holds the weights where its ``--model_path`` holds only config.json."""
CONTEXT_FLAGS = ("--ctx-size", "-c", "--context", "--max-model-len", "--max_seq_len")
"""The flags that give the context length in tokens."""
CACHE_FLAGS = ("--cache-type-k", "-ctk")
"""llama.cpp's K cache type (f16 by default)."""
MODEL_SUFFIXES = (".gguf", ".safetensors")
"""A bare argument with one of these endings names the model."""

LAUNCHERS = ("env", "numactl", "taskset", "nice", "ionice", "chrt", "nohup", "stdbuf", "strata-numa")
"""Programs that start the engine as their own argument (a prefix before the engine)."""
_NUMACTL_VALUE = frozenset(("-m", "-N", "-C", "-i", "-p", "-P", "-w", "--membind", "--cpunodebind",
                            "--physcpubind", "--interleave", "--preferred", "--preferred-many",
                            "--weighted-interleave"))
"""numactl's options that take their value as the next word when it is not attached."""
_PYTHON_VALUE = frozenset(("-W", "-X", "--check-hash-based-pycs"))
"""python's options that take the next word (``-m`` and ``-c`` end its options)."""


class EngineArgs(NamedTuple):
    """What an engine's command line says about its model, each as written; None when the
    command line does not say it."""

    model: Optional[str]
    """The model's path (a file, or a folder of safetensors shards)."""
    context: Optional[str]
    """The context length in tokens."""
    cache_type: Optional[str]
    """The K cache's type (``f16``, ``q8_0``...)."""


class EngineCommand(NamedTuple):
    """The engine's command line where the host shows one, and how to resolve its paths."""

    args: EngineArgs
    """What it says."""
    named_by: str
    """Where it was read: ``ExecStart in strata.service``, ``the command line of PID 48213``."""
    cwd: Optional[str]
    """The folder a relative path is relative to; None when the tree does not show it."""
    cwd_why: str = ""
    """Why :attr:`cwd` is None."""


def parse_engine_args(argv: Sequence[str], is_model_folder: Callable[[str], bool] = lambda p: False
                      ) -> EngineArgs:
    """The model, context and cache type of an engine's argv, after any launcher prefix
    (``env A=B``, ``numactl ... --``, ``taskset -c 1-3``) and the interpreter's own options
    (``python -u``, ``python -m module``). A bare argument names the model when it ends in
    ``.gguf`` or ``.safetensors`` or when ``is_model_folder`` says so."""
    words = engine_words(argv)
    model = _flag_value(words, MODEL_FLAGS)
    if model is None:
        model = next((w for w in words[1:] if not w.startswith("-")
                      and (w.endswith(MODEL_SUFFIXES) or is_model_folder(w))), None)
    return EngineArgs(model, _flag_value(words, CONTEXT_FLAGS), _flag_value(words, CACHE_FLAGS))


def engine_words(argv: Sequence[str]) -> List[str]:
    """The engine's own words: launcher prefixes dropped, and a Python interpreter's
    options (its ``-m`` is a module, never a model)."""
    words = list(argv)
    while words and _program(words[0]) in LAUNCHERS:
        words = _after_launcher(words)
    if words and _program(words[0]).startswith("python"):
        return _after_python(words)
    return words


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _after_launcher(words: List[str]) -> List[str]:
    """The command a launcher runs: the words after its options (and after ``--``)."""
    program, rest = _program(words[0]), words[1:]
    if "--" in rest and program in ("numactl", "strata-numa", "env"):
        return rest[rest.index("--") + 1:]
    i = 0
    while i < len(rest) and _launcher_word(program, rest[i]):
        i += 2 if _takes_value(program, rest[i]) else 1
    if program in ("taskset", "chrt") and i < len(rest):
        i += 1  # the mask or the priority
    return rest[i:]


def _launcher_word(program: str, word: str) -> bool:
    """Whether ``word`` is the launcher's own: an option, or env's ``NAME=VALUE``."""
    return word.startswith("-") or (program == "env" and "=" in word)


def _takes_value(program: str, word: str) -> bool:
    """Whether a launcher's option ``word`` takes the next word as its value."""
    if "=" in word:
        return False
    if program == "numactl":
        return word in _NUMACTL_VALUE
    if program == "env":
        return word in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string")
    return program in ("nice", "ionice", "stdbuf") and word in ("-n", "-c", "-i", "-o", "-e", "--adjustment")


def _after_python(words: List[str]) -> List[str]:
    """A Python command line from its script (or ``-m module``) on; the interpreter's
    options dropped."""
    i = 1
    while i < len(words):
        word = words[i]
        if word in ("-m", "-c"):
            return words[i + 1:]
        if not word.startswith("-") or word == "-":
            return words[i:]
        i += 2 if word in _PYTHON_VALUE else 1
    return words[i:]


def _flag_value(words: Sequence[str], flags: Tuple[str, ...]) -> Optional[str]:
    """The value of the first of ``flags`` found (``--flag VALUE`` or ``--flag=VALUE``);
    the last occurrence of that flag wins, as argparse has it."""
    for flag in flags:
        found: Optional[str] = None
        for i, word in enumerate(words[1:], 1):
            if word == flag and i + 1 < len(words):
                found = words[i + 1]
            elif flag.startswith("--") and word.startswith(flag + "="):
                found = word[len(flag) + 1:]
        if found is not None:
            return found
    return None


def exec_words(exec_start: str) -> List[str]:
    """The argv of an ``ExecStart=`` value: its ``@-:+!`` prefixes dropped, and with ``@``
    the second word (argv[0]) too."""
    stripped = exec_start.lstrip("-:+!")
    at = stripped.startswith("@")
    words = split_command(stripped.lstrip("@-:+!"))
    return words[:1] + words[2:] if at else words


def read_unit_command(root: Root, unit: str) -> Optional[EngineCommand]:
    """The engine unit's ``ExecStart=`` in effect, parsed; None when no unit file sets it."""
    settings = unit_settings(root, unit, "Service")
    found = settings.get("ExecStart")
    if found is None:
        return None
    args = parse_engine_args(exec_words(found[0]), lambda p: is_model_folder(root, p))
    workdir = settings.get("WorkingDirectory")
    cwd, why = _unit_cwd(workdir[0] if workdir else None)
    return EngineCommand(args, f"ExecStart in {unit}", cwd, why)


def _unit_cwd(workdir: Optional[str]) -> Tuple[Optional[str], str]:
    """The folder a system unit starts in: ``WorkingDirectory=`` (its ``-`` prefix dropped),
    else ``/``, systemd's default for system services."""
    if workdir is None:
        return "/", ""
    path = workdir.lstrip("-")
    if not path.startswith("/"):
        return None, f"WorkingDirectory={workdir} is not an absolute path the tree can show"
    return path, ""


def read_process_command(root: Root, pid: int) -> Optional[EngineCommand]:
    """The running engine's ``/proc/PID/cmdline``, parsed; None when it is unreadable or empty."""
    data = root.read_bytes(f"/proc/{pid}/cmdline")  # Root.read drops the NULs between words
    argv = [w for w in (data or b"").decode("utf-8", "replace").split("\0") if w]
    if not argv:
        return None
    args = parse_engine_args(argv, lambda p: is_model_folder(root, p))
    cwd = root.readlink(f"/proc/{pid}/cwd")
    why = "" if cwd else f"/proc/{pid}/cwd cannot be read ({root.reads.get(f'/proc/{pid}/cwd') or 'no link'})"
    return EngineCommand(args, f"the command line of PID {pid}", cwd, why)


def is_model_folder(root: Root, path: str) -> bool:
    """Whether an absolute ``path`` is a folder holding ``config.json`` and a
    ``*.safetensors`` file (a Hugging Face model folder)."""
    if not path.startswith("/") or not root.is_dir(path):
        return False
    names = root.listdir(path)
    return "config.json" in names and any(n.endswith(".safetensors") for n in names)


def resolve(path: str, cwd: Optional[str]) -> Optional[str]:
    """``path`` made absolute against ``cwd`` (normalised); None when it is relative and
    ``cwd`` is unknown."""
    if path.startswith("/"):
        return posixpath.normpath(path)
    if cwd is None:
        return None
    return posixpath.normpath(posixpath.join(cwd, path))
