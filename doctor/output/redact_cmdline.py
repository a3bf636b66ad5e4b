"""Command lines (``/proc/PID/cmdline``) before they leave the host: the value of every
option or ``NAME=VALUE`` word whose name looks secret goes, and so does every value of an
environment given as an option, every JSON value under a secret-looking key and every
password in a URL. What replaces a value is the redactor's to say (a ``secret-N``
placeholder, counted with the others).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, List, Optional

SECRET_NAME = re.compile(r"(?i)key|token|secret|pass|auth|credential|session|cookie")
"""Option, variable and JSON key names whose values a command line must not carry."""
ENV_OPTIONS = frozenset({"env", "environ", "environment", "envs", "env-vars", "extra-env"})
"""Options whose value is an environment (a JSON object or ``NAME=VALUE``): every value
goes, as in ``/proc/PID/environ``, since environments carry credentials no name shows."""
URL_PASSWORD = re.compile(r"(?<=://)([^/@:\s]*:)([^/@\s]+)(?=@)")
"""``scheme://user:PASSWORD@host``."""
_OPTION_NAME = re.compile(r"-{1,2}([A-Za-z0-9][\w.-]*)")
_VARIABLE = re.compile(r"([A-Za-z_][\w.-]*)=(.*)", re.DOTALL)


class CommandLineMask:
    """Masks the secrets of command lines; ``secret`` gives what a value becomes."""

    def __init__(self, secret: Callable[[str], str]) -> None:
        self._secret = secret

    def mask(self, data: bytes) -> bytes:
        """A ``/proc/PID/cmdline`` (NUL-separated words) with the value of every option
        and ``NAME=VALUE`` word whose name looks secret (:data:`SECRET_NAME`), every JSON
        value under such a key, every value of an environment option and every password in
        a URL replaced by a ``secret-N`` placeholder. Done whether or not redaction is
        enabled (as for environments); each value counts in :meth:`counts`."""
        words = data.decode("utf-8", "surrogateescape").split("\0")
        masked: List[str] = []
        pending: Optional[str] = None  # the option whose value is the next word
        for word in words:
            if pending is not None and word and not word.startswith("-"):
                masked.append(self._option_value(pending, word))
                pending = None
                continue
            pending = None
            option = _OPTION_NAME.fullmatch(word.split("=", 1)[0])
            if option is not None:
                name = option.group(1)
                if "=" in word:
                    head, value = word.split("=", 1)
                    masked.append(f"{head}={self._option_value(name, value)}")
                    continue
                if _secret_name(name) or name.lower() in ENV_OPTIONS:
                    pending = name
                masked.append(word)
                continue
            masked.append(self._free_word(word))
        return "\0".join(masked).encode("utf-8", "surrogateescape")

    def _option_value(self, name: str, value: str) -> str:
        if name.lower() in ENV_OPTIONS:
            return self._environment(value)
        if _secret_name(name):
            return self._secret(value)
        return self._free_word(value)

    def _free_word(self, word: str) -> str:
        """A word that is no option's secret value: JSON, ``NAME=VALUE`` or a URL."""
        if word[:1] in "{[":
            try:
                parsed = json.loads(word)
            except ValueError:
                return self._json_text(word)
            return json.dumps(self._json_value(parsed, False), ensure_ascii=False)
        variable = _VARIABLE.fullmatch(word)
        if variable is not None and _secret_name(variable.group(1)):
            return f"{variable.group(1)}={self._secret(variable.group(2))}"
        return URL_PASSWORD.sub(lambda m: m.group(1) + self._secret(m.group(2)), word)

    def _environment(self, value: str) -> str:
        """An environment given as an option: names stay, values go."""
        if value[:1] == "{":
            try:
                parsed = json.loads(value)
            except ValueError:
                return self._json_text(value, every=True)
            return json.dumps(self._json_value(parsed, True), ensure_ascii=False)
        variable = _VARIABLE.fullmatch(value)
        if variable is not None:
            return f"{variable.group(1)}={self._secret(variable.group(2))}"
        return self._free_word(value)

    def _json_value(self, value: Any, secret: bool) -> Any:
        """``value`` with every scalar under a secret-looking key (or under ``secret``)
        replaced; strings elsewhere are masked as words."""
        if isinstance(value, dict):
            return {k: self._json_value(v, secret or _secret_name(str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [self._json_value(v, secret) for v in value]
        if value is None or isinstance(value, bool):
            return value
        if secret:
            return self._secret(str(value))
        return self._free_word(value) if isinstance(value, str) else value

    def _json_text(self, text: str, every: bool = False) -> str:
        """JSON that does not parse (cut short, shell-quoted): ``"KEY": "VALUE"`` pairs."""
        def pair(match: re.Match[str]) -> str:
            if not every and not _secret_name(match.group(2)):
                return match.group(0)
            return match.group(1) + self._secret(match.group(3)) + match.group(4)

        return _JSON_PAIR.sub(pair, text)



_JSON_PAIR = re.compile(
    r'(\\?"([^"\\]*)\\?"\s*:\s*(?:\\?"(?=.))?)((?<=")(?:[^"\\]|\\[^"])*|[^\s,}\]"\\]+)(\\?"|)'
)
"""A ``"KEY": "VALUE"`` (or ``"KEY": 123``) pair, quotes shell-escaped or not, the value
possibly cut short by the end of the word."""


def _secret_name(name: str) -> bool:
    return SECRET_NAME.search(name) is not None and not name.lower().startswith("no-")


