"""Secrets before they leave the host, in command lines (``/proc/PID/cmdline``) and in any
text (unit files, ``systemctl show``, the report): the value of every option or
``NAME=VALUE`` word whose name looks secret goes, and so does every value of an
environment given as an option, every JSON or dict value under a secret-looking key, every
password in a URL, every ``Authorization:`` credential, AWS access key id and webhook
token. A unit file's ``Exec*=`` and ``Environment=`` lines are masked word by word as a
command line is. What replaces a value is the redactor's to say (a ``secret-N``
placeholder, counted with the others).

Every pattern is linear in the length of a line: a name is matched from its first
character only (a look-behind), its secret word found by one look-ahead (never re-entered
on backtracking), and no quantifier nests inside another over the same characters.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterator, List, Optional, Tuple

_BROAD = r"key|token|secret|pass|auth|credential|session|cookie|bearer|jwt|(?<![a-z])pw(?![a-z])"
SECRET_NAME = re.compile(f"(?i){_BROAD}")
"""Option, variable and JSON key names whose values a command line must not carry."""
_NARROW = r"password|passwd|token|secret|api[_-]?key|access[_-]?key|private[_-]?key|bearer|jwt"
"""Names of ``NAME=VALUE``, ``name: value`` and ``"name": value`` in any text: narrower, so
kernel text (``KeyringMode=``, ``Speculation_Store_Bypass:``) keeps its values."""
ENV_OPTIONS = frozenset({"env", "environ", "environment", "envs", "env-vars", "extra-env"})
"""Options whose value is an environment (a JSON object or ``NAME=VALUE``): every value
goes, as in ``/proc/PID/environ``, since environments carry credentials no name shows."""
URL_PASSWORD = re.compile(r"://[^/@:\s\0]*:(?P<v>[^/@\s\0]+)@")
"""``scheme://user:PASSWORD@host``."""
_OPTION_NAME = re.compile(r"-{1,2}([A-Za-z0-9][\w.-]*)")
_OPTION_LIKE = re.compile(r"--(?:[A-Za-z0-9].*)?|-[A-Za-z]", re.DOTALL)
"""A word that is an option, not the value of the option before it: ``--name``, ``--`` or
``-x``. Any other word after a secret option is its value (``--auth-token -abc123``)."""
_VARIABLE = re.compile(r"([A-Za-z_][\w.-]*)=(.*)", re.DOTALL)
_DASH_P = "-p"
_VALUE = r"""(?:"(?P<dq>[^"\n\0]*)"|'(?P<sq>[^'\n\0]*)'|["']?(?P<v>[^\s\0"',;&]+))"""
"""A value: double- or single-quoted (the quotes kept, the inside masked), or one word
(after a quote that never closes)."""
_NOT_OPTION = r"(?!--[A-Za-z0-9]|--(?![^\s])|-[A-Za-z](?![^\s])|\\\n)"
"""What follows a secret option is its value unless it is another option (as
:data:`_OPTION_LIKE`) or a unit file's line continuation."""
TEXT_PATTERNS: Tuple[re.Pattern[str], ...] = (
    # "PASSWORD=two words", as systemd's Environment= quotes it
    re.compile(rf"""(?i)(?P<q>["'])(?=[\w.-]*?(?:{_NARROW}))[\w.-]+=(?P<v>[^"'\n\0]*)(?P=q)"""),
    # TOKEN=..., password: ...
    # (from the secret word on: the name's head is kept anyway, and at most 64 characters
    # between the word and the "=" keep each try short on a line that repeats the word)
    re.compile(rf"(?i)(?:{_NARROW})[\w.-]{{0,64}}\s*[=:]\s*{_VALUE}"),
    # --api-key VALUE, --db-pass=VALUE, --password= VALUE: two dashes, so never kernel text
    # (the two dashes first, then the look-behind, so a search skips to each "--" at C speed)
    re.compile(rf"(?i)--(?<![\w.-]--)(?!no-)(?=[\w.-]*?(?:{_BROAD}))[\w.-]+(?:=[ \t]*|\s+)"
               rf"{_NOT_OPTION}{_VALUE}"),
    # Authorization: Bearer VALUE, Proxy-Authorization: Basic VALUE
    re.compile(r"""(?i)(?<![\w-])(?:proxy-)?authorization["']?[ \t]*[:=][ \t]*["']?"""
               r"(?:(?:bearer|basic|token|digest|negotiate)[ \t]+)?(?P<v>[^\s\0\"',;\\]+)"),
    re.compile(r"(?i)(?<![\w-])bearer[ \t]+(?P<v>[A-Za-z0-9._~+/=-]{8,})"),
    URL_PASSWORD,
    re.compile(r"(?<![A-Za-z0-9])(?P<v>A(?:KI|SI)A[A-Z0-9]{16})(?![A-Za-z0-9])"),  # AWS access key id
    re.compile(r"hooks\.slack\.com/services/(?P<v>[\w/-]+)"),
    re.compile(r"discord(?:app)?\.com/api/webhooks/\d+/(?P<v>[\w-]+)"),
    re.compile(r"(?i)(?<!/api)/webhooks?/(?P<v>[\w-]{16,})"),
    # {'password': 'x'}, "api_key": "y", "token": 123
    re.compile(rf"""(?i)(?P<q>["'])(?=[\w.-]*?(?:{_NARROW}))[\w.-]+(?P=q)\s*:\s*"""
               r"""(?:"(?P<dq>(?:[^"\\\n\0]|\\.)*)"|'(?P<sq>(?:[^'\\\n\0]|\\.)*)'|(?P<v>[^\s\0,}\]"'\\]+))"""),
    # mysql -pSECRET, sshpass -p SECRET in text: only after such a tool on the same line, as
    # other text's -p is no password (the report's own "nvidia-smi -pm 1", "mkdir -p DIR");
    # a command line's words mask -p wherever it is (CommandLineMask.words). A plain number
    # is a port, and stays.
    re.compile(rf"(?<![\w.-])(?:mysql[\w-]*|mariadb[\w-]*|sshpass)(?=[\s\0])[^\n]*?(?<=[\s\0])-p"
               rf"(?:[ \t]+{_NOT_OPTION}|(?=[^\s\0]))(?!\d+(?![^\s\0\"',;&]))"
               r"""(?P<v>[^\s\0"',;&=]+)(?=[\s\0"',;&]|$)"""),
    # SetCredential=ID:VALUE (LoadCredential= names a path, and stays)
    re.compile(r"(?m)^[ \t]*SetCredential(?:Encrypted)?=[^:\n]*:[ \t]*(?P<v>[^\n]+)"),
)
"""Secrets in any text, each value in group ``v``, ``dq`` or ``sq``; the rest is kept."""
_NARROW_WORDS = ("pass", "token", "secret", "key", "bearer", "jwt")
_TRIGGERS: Tuple[Tuple[str, ...], ...] = (
    _NARROW_WORDS, _NARROW_WORDS, ("--",), ("authorization",), ("bearer",), ("://",), ("AKIA", "ASIA"),
    ("hooks.slack.com/services/",), ("/api/webhooks/",), ("/webhook",), _NARROW_WORDS,
    ("mysql", "mariadb", "sshpass"),
    ("SetCredential",),
)
"""Strings one of which every match of the pattern above in the same place contains
(lower-cased where the pattern ignores case): a pattern whose strings are all absent is
not run, so most patterns cost one ``in`` test on most text."""
_RUN = tuple(
    (re.compile(p.pattern[4:]), True, t) if p.pattern.startswith("(?i)") else (p, False, t)
    for p, t in zip(TEXT_PATTERNS, _TRIGGERS)
)
"""Each pattern, whether it runs on the lower-cased text, and its strings. A pattern that
ignores case runs without the flag on the lower-cased text: its secret words are then
plain letters, which a search skips to at C speed (under the flag it tries every place)."""
UNIT_COMMAND_LINE = re.compile(r"(?m)^([ \t]*(?:Exec[A-Za-z]*|Environment)=)((?:[^\n]*\\\n)*[^\n]*)")
"""A unit file's (or ``systemctl show``'s) command line or environment, continuation
lines included."""
_QUOTED = r"""[^\s"']+|"[^"]*"?|'[^']*'?"""
_UNIT_SPLIT = re.compile(f"((?:{_QUOTED})+)")
"""Splits such a line into what lies between its words and its words, quotes kept."""
_UNIT_PIECE = re.compile(_QUOTED)


class CommandLineMask:
    """Masks the secrets of command lines and text; ``secret`` gives what a value becomes."""

    def __init__(self, secret: Callable[[str], str]) -> None:
        self._secret = secret

    def mask(self, data: bytes) -> bytes:
        """A ``/proc/PID/cmdline`` (NUL-separated words) with the value of every option
        and ``NAME=VALUE`` word whose name looks secret (:data:`SECRET_NAME`; after ``-p``
        unless a plain number), every JSON value under such a key, every value of an
        environment option, and every secret :meth:`text` finds within a word replaced by
        a ``secret-N`` placeholder."""
        words = self.words(data.decode("utf-8", "surrogateescape").split("\0"))
        return self.text("\0".join(words), units=False).encode("utf-8", "surrogateescape")

    def words(self, words: List[str]) -> List[str]:
        """One command line's words, each option's secret value masked."""
        masked: List[str] = []
        pending: Optional[str] = None  # the option whose value is the next word
        for word in words:
            if word == "\\":
                masked.append(word)  # a unit file's line continuation: the value comes next
                continue
            if pending is None and word[:1] not in "-{[" and "=" not in word:
                masked.append(word)  # a plain word, as most are: nothing to mask here
                continue
            if pending is not None and word and _OPTION_LIKE.fullmatch(word) is None:
                masked.append(self._option_value(pending, word))
                pending = None
                continue
            pending = None
            if word[:2] == _DASH_P and "=" not in word:
                masked.append(_DASH_P + self._dash_p(word[2:]) if len(word) > 2 else word)
                pending = _DASH_P if len(word) == 2 else None
                continue
            option = _OPTION_NAME.fullmatch(word.split("=", 1)[0])
            if option is None:
                masked.append(self._free_word(word))
                continue
            name = option.group(1)
            head, equals, value = word.partition("=")
            if equals and value:
                masked.append(f"{head}={self._option_value(name, value)}")
                continue
            if _secret_name(name) or name.lower() in ENV_OPTIONS:
                pending = name  # --api-key VALUE, --password= VALUE
            masked.append(word)
        return masked

    def text(self, text: str, units: bool = True) -> str:
        """Any text with its secrets masked: a unit file's command lines and environments
        word by word (:meth:`words`; not when ``units`` is false, for a command line's own
        words), then every :data:`TEXT_PATTERNS` match."""
        if units and ("Exec" in text or "Environment=" in text):
            text = UNIT_COMMAND_LINE.sub(self._unit_line, text)
        lowered = text.lower()
        for pattern, lower, trigger in _RUN:
            if lower and len(lowered) != len(text):  # a letter whose lower case is longer
                lower, pattern = False, re.compile(pattern.pattern, re.IGNORECASE)
            haystack = lowered if lower else text
            if any(t in haystack for t in trigger):
                masked = self._mask_matches(pattern.finditer(haystack), text)
                if masked is not text:
                    text, lowered = masked, masked.lower()
        return text

    def _mask_matches(self, matches: Iterator[re.Match[str]], text: str) -> str:
        """``text`` with the value of each match (group ``v``, ``dq`` or ``sq``, at the
        same place in ``text`` as in the string searched) masked."""
        parts: List[str] = []
        last = 0
        for match in matches:
            groups = match.groupdict()
            start, end = match.span(next(g for g in ("v", "dq", "sq") if groups.get(g) is not None))
            parts.append(text[last:start])
            parts.append(self._secret(text[start:end]))
            last = end
        if not parts:
            return text
        parts.append(text[last:])
        return "".join(parts)

    def _unit_line(self, match: re.Match[str]) -> str:
        parts = _UNIT_SPLIT.split(match.group(2))  # what lies between the words, then each word
        tokens = parts[1::2]
        words = [_unquote(t) for t in tokens] if "'" in match.group(2) or '"' in match.group(2) else tokens
        masked = self.words(words)
        if masked == words:
            return match.group(0)  # the common case
        parts[1::2] = [t if new == word else _requote(t, new) for t, word, new in zip(tokens, words, masked)]
        return match.group(1) + "".join(parts)

    def _dash_p(self, value: str) -> str:
        return value if value.isdigit() else self._secret(value)

    def _option_value(self, name: str, value: str) -> str:
        if name == _DASH_P:
            return self._dash_p(value)
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
        return word

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
        """JSON or a Python dict that does not parse (cut short, shell-quoted, single
        quotes): ``"KEY": "VALUE"`` and ``'KEY': 'VALUE'`` pairs."""
        def pair(match: re.Match[str]) -> str:
            if not every and not _secret_name(match.group("key")):
                return match.group(0)
            return match.group(1) + self._secret(match.group("value")) + match.group("end")

        return _JSON_PAIR.sub(pair, text)


_JSON_PAIR = re.compile(
    r"""(\\?(?P<q>["'])(?P<key>(?:(?!(?P=q))[^\\])*)\\?(?P=q)\s*:\s*(?:\\?(?P=q)(?=.))?)"""
    r"""(?P<value>(?<=["'])(?:(?!(?P=q))[^\\]|\\(?!(?P=q)).)*|[^\s,}\]"'\\]+)(?P<end>\\?(?P=q)|)""",
    re.DOTALL,
)
"""A ``"KEY": "VALUE"`` (or ``"KEY": 123``, or single-quoted) pair, quotes shell-escaped or
not, the value possibly cut short by the end of the word."""


def _unquote(token: str) -> str:
    """The word a quoted token stands for: ``--token="a b"`` is ``--token=a b``."""
    if '"' not in token and "'" not in token:
        return token
    return "".join(p[1:].rstrip(p[0]) if p[0] in "\"'" else p for p in _UNIT_PIECE.findall(token))


def _requote(token: str, word: str) -> str:
    """``word`` quoted as ``token`` was: ``--token="a b"`` masked is ``--token="secret-1"``."""
    quote = next((c for c in token if c in "\"'"), "")
    head = token.split(quote, 1)[0] if quote else token
    if quote and word.startswith(head) and quote not in word[len(head):]:
        return f"{head}{quote}{word[len(head):]}{quote}"
    if not any(c.isspace() or c in "\"'\\" for c in word):
        return word
    return f"'{word}'" if "'" not in word else '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _secret_name(name: str) -> bool:
    return SECRET_NAME.search(name) is not None and not name.lower().startswith("no-")
