"""Redaction: private strings become stable placeholders before a report leaves the host.

As ``sos clean`` does, each private value (a host name, an address, a user name, a serial)
becomes a placeholder of its kind (``host-1``, ``ip-2``, ``user-1``...). The same value
always becomes the same placeholder within one :class:`Redactor`, so a report and its
bundle agree with each other, and a maintainer can still see that two files name the same
host. The mapping lives only in memory: nothing here can write it out.

Values come from two places: the host's identity (``facts/identity.py`` reads it through
a private Root, so it is not added to the bundle), and patterns that match wherever they
occur (IPv4/IPv6 and MAC addresses, UUIDs, home paths). Secrets, in command lines and in
any text, are masked by ``output/redact_cmdline.py``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from strata_doctor.facts.identity import HostIdentity
from strata_doctor.output.redact_cmdline import CommandLineMask

KINDS: Tuple[Tuple[str, str, str], ...] = (
    ("host", "host name", "host names"),
    ("domain", "domain name", "domain names"),
    ("ip", "IP address", "IP addresses"),
    ("mac", "MAC address", "MAC addresses"),
    ("user", "user name", "user names"),
    ("machine-id", "machine id", "machine ids"),
    ("uuid", "UUID", "UUIDs"),
    ("serial", "serial number", "serial numbers"),
    ("secret", "secret", "secrets"),
)
"""Placeholder kinds and how the report names one and several, in report order."""

PLACEHOLDER = re.compile(r"^(?:" + "|".join(re.escape(k[0]) for k in KINDS) + r")-\d+$")

# Firmware fills serial fields with these when the vendor left them empty; they say
# nothing about the machine, and replacing them would only hide that fact.
JUNK_VALUES = frozenset({
    "", "none", "n/a", "na", "0", "not specified", "not applicable", "not present",
    "default string", "to be filled by o.e.m.", "system serial number", "chassis serial number",
    "base board serial number", "0123456789", "123456789", "unknown", "[n/a]", "(none)",
    "localhost", "localhost.localdomain", "localdomain",
})

HOME_PATH = re.compile(r"(/(?<![\w.-]/)(?:home|Users|var/home|export/home)/)([A-Za-z0-9_][\w.-]*)")
"""``/home/NAME`` (the slash first, so a search skips to each slash at C speed)."""
MAC = re.compile(r"(?<![0-9A-Fa-f:])[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){5}(?![0-9A-Fa-f:])")
UUID = re.compile(
    r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
    r"(?![0-9A-Fa-f])"
)
UUID_HEAD = re.compile(r"(?<![0-9A-Fa-f])([0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){0,3})-(?![0-9A-Fa-f])")
"""The leading groups of a UUID cut short after a dash."""
IPV6 = re.compile(r"(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:%[\w.-]+)?(?![\w:])")
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?!\.?\d)")
KEEP_IPS = frozenset({"127.0.0.1", "0.0.0.0", "255.255.255.255", "::", "::1"})
"""Addresses that are the same on every host, and so private to none."""

PROTECTED = frozenset({
    "vm", "sys", "proc", "dev", "run", "etc", "usr", "var", "lib", "kernel", "node", "cpu", "gpu",
    "mm", "net", "pci", "bus", "class", "devices", "system", "linux", "systemd", "nvidia", "strata",
    "debian", "ubuntu", "fedora", "rhel", "centos", "host", "server", "docker", "container",
})
"""Words a host or user may be named that the report and the kernel's own paths also use:
replacing them would break paths (``/proc/sys/vm``) and say nothing about the host."""
NAME_KINDS = ("host", "domain", "user")

UID_MIN = 1000  # first uid of a person on mainstream distributions
SYSTEM_USERS = frozenset({"root", "nobody", "nfsnobody"})


class Redactor:
    """Replaces private values with stable placeholders; the mapping is never exported."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._known: Dict[str, str] = {}
        self._placeholders: Dict[str, str] = {}
        self._issued: Dict[str, int] = {}
        self._pattern: Optional[re.Pattern[str]] = None
        self._protected = set(PROTECTED)
        self._mask = CommandLineMask(self._secret)
        self._uuid_heads: Dict[str, str] = {}
        """Leading groups of a known UUID (``ced04d50-57e7``) -> the UUID: systemd looks
        for a scope's drop-ins under each (``vte-spawn-ced04d50-.scope.d``)."""

    def protect(self, words: Iterable[str]) -> None:
        """Never treat these words as host, domain or user names (path components, the unit
        name, check ids): they are not private, and replacing them breaks replay."""
        for word in words:
            if word:
                self._protected.add(word.lower())

    # -- learning -------------------------------------------------------------
    def add(self, kind: str, value: Optional[str]) -> None:
        """Register a private value of ``kind`` to be replaced wherever it appears."""
        if value is None:
            return
        value = value.replace("\0", "").strip()
        if value.lower() in JUNK_VALUES or PLACEHOLDER.match(value) or len(value) < 2:
            return
        if kind in NAME_KINDS and value.lower() in self._protected:
            return
        if kind == "host" and "." in value:
            short, _, domain = value.partition(".")
            self.add("host", short)
            if "." in domain:  # a bare TLD such as "lan" would match too much
                self.add("domain", domain)
        self._known.setdefault(_key(kind, value), kind)
        self._pattern = None

    def learn(self, text: str) -> None:
        """Register user names that appear in home paths (``/home/alice/...``), and UUIDs,
        so that their leading groups are replaced wherever they show alone."""
        for match in HOME_PATH.finditer(text):
            self.add("user", match.group(2))
        if self.enabled and "-" in text:
            for match in UUID.finditer(text):
                self._learn_uuid(match.group(0))

    def _learn_uuid(self, value: str) -> None:
        groups = value.lower().split("-")
        for count in range(1, len(groups)):
            self._uuid_heads.setdefault("-".join(groups[:count]), value)

    def learn_host(self, identity: HostIdentity) -> None:
        """Register this machine's names, ids, serials and people
        (:func:`~strata_doctor.facts.identity.read_identity`)."""
        for kind, value in identity.values:
            self.add(kind, value)
        self._learn_hosts_file(identity.hosts)
        self._learn_passwd(identity.passwd)
        for kind, name in identity.live_names:
            if kind != "user" or name not in SYSTEM_USERS:
                self.add(kind, name)
        if identity.home is not None:
            self.learn(identity.home + "/")

    def _learn_hosts_file(self, text: str) -> None:
        names = {k.split("\0", 1)[1] for k, kind in self._known.items() if kind == "host"}
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) > 1 and any(w.lower() in names for w in words[1:]):
                for word in words[1:]:
                    self.add("host", word)

    def _learn_passwd(self, text: str) -> None:
        for line in text.splitlines():
            fields = line.split(":")
            if len(fields) < 6 or not fields[2].isdigit() or len(fields[2]) > 20:  # a uid is 32 bits
                continue
            if int(fields[2]) >= UID_MIN and fields[0] not in SYSTEM_USERS and int(fields[2]) < 65534:
                self.add("user", fields[0])
                self.learn(fields[5] + "/")

    # -- replacing ------------------------------------------------------------
    def text(self, text: str) -> str:
        """``text`` with every private value replaced (unchanged when disabled)."""
        if not self.enabled or not text:
            return text
        self.learn(text)
        for replace in self._steps():
            text = replace(text)
        return text

    def data(self, data: bytes) -> bytes:
        """Bytes redacted as text; bytes that are not UTF-8 survive unchanged."""
        if not self.enabled or not data:
            return data
        return self.text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")

    def value(self, obj: Any) -> Any:
        """A JSON-like value with every string (and key) redacted."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.value(k): self.value(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.value(v) for v in obj]
        return obj

    def command_line(self, data: bytes) -> bytes:
        """A ``/proc/PID/cmdline`` (NUL-separated words) with the value of every option
        and ``NAME=VALUE`` word whose name looks secret replaced by a ``secret-N``
        placeholder (:class:`~strata_doctor.output.redact_cmdline.CommandLineMask`). Done
        whether or not redaction is enabled (as for environments); each value counts in
        :meth:`counts`."""
        return self._mask.mask(data)

    def _secret(self, value: str) -> str:
        if not value or PLACEHOLDER.match(value):
            return value
        return self._placeholder("secret", value)

    def counts(self) -> Dict[str, int]:
        """Distinct values replaced so far, per kind (kinds with none are left out)."""
        return {kind: self._issued[kind] for kind, _, _ in KINDS if self._issued.get(kind)}

    def summary(self) -> List[str]:
        """``["2 host names", "1 IP address"]``: what was redacted, never what it was."""
        names = {kind: (one, many) for kind, one, many in KINDS}
        return [f"{count} {names[kind][count != 1]}" for kind, count in self.counts().items()]

    # -- internals ------------------------------------------------------------
    def _placeholder(self, kind: str, value: str) -> str:
        key = _key(kind, value)
        found = self._placeholders.get(key)
        if found is None:
            self._issued[kind] = self._issued.get(kind, 0) + 1
            found = f"{kind}-{self._issued[kind]}"
            self._placeholders[key] = found
        return found

    def _steps(self) -> Iterable[Callable[[str], str]]:
        return (self._replace_secrets, self._replace_known, self._replace_homes, self._replace_macs,
                self._replace_uuids, self._replace_ipv6, self._replace_ipv4)

    def _replace_secrets(self, text: str) -> str:
        return self._mask.text(text)

    def _replace_known(self, text: str) -> str:
        if not self._known:
            return text
        if self._pattern is None:
            # Longest first, so a FQDN is replaced whole before its short host name.
            values = sorted({k.split("\0", 1)[1] for k in self._known}, key=lambda v: (-len(v), v))
            alternation = "|".join(re.escape(v) for v in values)
            self._pattern = re.compile(rf"(?<![A-Za-z0-9])(?:{alternation})(?![A-Za-z0-9])", re.IGNORECASE)
        return self._pattern.sub(self._known_match, text)

    def _known_match(self, match: re.Match[str]) -> str:
        value = match.group(0)
        for kind, _, _ in KINDS:
            if _key(kind, value) in self._known:
                return self._placeholder(kind, value)
        return value  # case differs for a case-sensitive kind: not the same value

    def _replace_homes(self, text: str) -> str:
        def home(match: re.Match[str]) -> str:
            name = match.group(2)
            if PLACEHOLDER.match(name):
                return match.group(0)
            return match.group(1) + self._placeholder("user", name)

        return HOME_PATH.sub(home, text)

    def _replace_macs(self, text: str) -> str:
        if ":" not in text and "-" not in text:
            return text  # the cheap test spares a long line the pattern's scan
        def mac(match: re.Match[str]) -> str:
            value = match.group(0)
            if set(value.replace(":", "").replace("-", "")) <= {"0"}:
                return value  # the all-zero address of loopback and tunnels
            return self._placeholder("mac", value)

        return MAC.sub(mac, text)

    def _replace_uuids(self, text: str) -> str:
        def uuid(match: re.Match[str]) -> str:
            self._learn_uuid(match.group(0))
            return self._placeholder("uuid", match.group(0))

        if "-" not in text:
            return text
        text = UUID.sub(uuid, text)
        if not self._uuid_heads:
            return text

        def head(match: re.Match[str]) -> str:
            full = self._uuid_heads.get(match.group(1).lower())
            return match.group(0) if full is None else self._placeholder("uuid", full) + "-"

        return UUID_HEAD.sub(head, text)

    def _replace_ipv6(self, text: str) -> str:
        if ":" not in text:
            return text
        def ipv6(match: re.Match[str]) -> str:
            value = match.group(0)
            address = value.split("%", 1)[0]
            if address in KEEP_IPS or not _is_ipv6(address):
                return value
            return self._placeholder("ip", address) + value[len(address):]

        return IPV6.sub(ipv6, text)

    def _replace_ipv4(self, text: str) -> str:
        if "." not in text:
            return text
        def ipv4(match: re.Match[str]) -> str:
            value = match.group(0)
            if value in KEEP_IPS or not _is_ipv4(value):
                return value
            return self._placeholder("ip", value)

        return IPV4.sub(ipv4, text)


def _key(kind: str, value: str) -> str:
    # Names and addresses compare without case; user names and serials are case-sensitive.
    folded = value.lower() if kind in ("host", "domain", "mac", "ip", "uuid", "machine-id") else value
    return f"{kind}\0{folded}"


def _is_ipv6(text: str) -> bool:
    if "::" not in text and text.count(":") != 7:
        return False  # times (12:34:56) and PCI addresses are not addresses
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return False
    # "0::" also opens every cgroup v2 line ("0::/system.slice"); :: and ::1 reveal nothing.
    return not (address.is_unspecified or address.is_loopback)


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True
