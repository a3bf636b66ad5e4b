"""Redaction: stable placeholders per kind, patterns that catch addresses without eating
PCI addresses or times, and identity files read without being recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

from strata_doctor.facts.identity import read_identity
from strata_doctor.output.redact import Redactor
from strata_doctor.root import Root
from tests.conftest import write_tree


def test_same_value_same_placeholder_and_counts() -> None:
    r = Redactor()
    r.add("host", "gpubox7")
    first = r.text("host gpubox7 talks to 10.20.30.40 and 10.20.30.41")
    second = r.text("GPUBOX7 again, and 10.20.30.40 again")
    assert first == "host host-1 talks to ip-1 and ip-2"
    assert second == "host-1 again, and ip-1 again"
    assert r.counts() == {"host": 1, "ip": 2}
    assert r.summary() == ["1 host name", "2 IP addresses"]


def test_fqdn_is_replaced_whole_and_its_parts_alone() -> None:
    r = Redactor()
    r.add("host", "gpubox7.lab.example.com")
    text = r.text("gpubox7.lab.example.com / gpubox7 / lab.example.com / sandbox")
    assert "gpubox7" not in text and "example" not in text
    assert text.endswith("/ sandbox")  # not a substring match inside another word
    assert set(r.counts()) == {"host", "domain"}


def test_addresses_macs_and_uuids() -> None:
    r = Redactor()
    text = r.text(
        "inet6 fe80::1ff:fe23:4567:890a/64 link 52:54:00:12:34:56 uuid "
        "4C4C4544-0042-3510-8052-B7C04F4E4D32 GPU-1c2f3a4b-5d6e-7f80-91a2-b3c4d5e6f708 10.0.0.9."
    )
    assert text == "inet6 ip-1/64 link mac-1 uuid uuid-1 GPU-uuid-2 ip-2."


def test_kernel_text_is_left_alone() -> None:
    r = Redactor()
    text = (
        "0000:84:00.0 84:00.0 12:34:56 std::vector ::1 127.0.0.1 0.0.0.0 00:00:00:00:00:00 "
        "6.1.0-18-amd64 550.54.15 1.2.3.4.5 Cpus_allowed_list:\t0-21,44-65 "
        "kernelpagesize_kB=4 N0=12 N1=3"
    )
    assert r.text(text) == text
    assert r.counts() == {}


def test_home_paths_teach_the_user_name() -> None:
    r = Redactor()
    r.learn("ExecStart=/home/alice/strata/serve")
    assert r.text("Environment=OWNER=alice") == "Environment=OWNER=user-1"
    assert r.text("/home/alice/x /Users/bob/y") == "/home/user-1/x /Users/user-2/y"


def test_junk_serials_and_protected_words_are_not_private() -> None:
    r = Redactor()
    r.protect(["vm", "strata"])
    for junk in ("To Be Filled By O.E.M.", "Default string", "0", "localhost"):
        r.add("serial", junk)
    r.add("host", "vm")
    r.add("user", "strata")
    text = "/proc/sys/vm/nr_hugepages strata.service Default string"
    assert r.text(text) == text


def test_disabled_redactor_changes_nothing() -> None:
    r = Redactor(enabled=False)
    r.add("host", "gpubox7")
    assert r.text("gpubox7 10.1.2.3") == "gpubox7 10.1.2.3"
    assert r.data(b"10.1.2.3") == b"10.1.2.3"
    assert r.counts() == {}


def test_bytes_that_are_not_utf8_survive() -> None:
    r = Redactor()
    data = b"\xff\xfe 10.1.2.3 \x00"
    assert r.data(data) == b"\xff\xfe ip-1 \x00"


def test_values_in_json_keys_and_lists() -> None:
    r = Redactor()
    r.add("host", "gpubox7")
    assert r.value({"gpubox7": ["gpubox7", 1, None]}) == {"host-1": ["host-1", 1, None]}


def test_learn_host_reads_identity_files_without_recording_them(tmp_path: Path) -> None:
    root = Root(write_tree(tmp_path / "h", {
        "/etc/hostname": "gpubox7\n",
        "/etc/hosts": "10.20.30.40 gpubox7.lab.example.com gpubox7\n127.0.0.1 localhost\n",
        "/etc/machine-id": "4f1c0e2b9a8d4c6e8f0a1b2c3d4e5f60\n",
        "/etc/passwd": "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/bash\n"
                       "nobody:x:65534:65534::/:/usr/sbin/nologin\n",
        "/sys/class/dmi/id/product_serial": "SN-8C3X9Q2\n",
        "/sys/class/dmi/id/board_serial": "Default string\n",
    }))
    r = Redactor()
    r.learn_host(read_identity(root))
    assert root.reads == {}
    text = r.text("gpubox7.lab.example.com alice 4f1c0e2b9a8d4c6e8f0a1b2c3d4e5f60 SN-8C3X9Q2 root nobody")
    assert text == "host-1 user-1 machine-id-1 serial-1 root nobody"


def test_credentials_lose_their_values() -> None:
    r = Redactor()
    text = r.text("API_TOKEN=abc123\0HOME=/root\0 serve --api-key sk-XYZ --port 8 password: hunter2")
    assert "abc123" not in text and "sk-XYZ" not in text and "hunter2" not in text
    assert "--port 8" in text and "HOME=/root" in text
    assert r.counts() == {"secret": 3}


def test_cgroup_v2_lines_are_not_ipv6_addresses() -> None:
    from strata_doctor.output.redact import Redactor

    redactor = Redactor()
    assert redactor.text("0::/system.slice/strata.service\n0::/\n") == (
        "0::/system.slice/strata.service\n0::/\n"
    )


# -- command lines (docs/report.md, "Redaction") ------------------------------------
def _masked(*words: str) -> List[str]:
    r = Redactor()
    return r.command_line("\0".join(words).encode()).decode().split("\0")


def test_secret_options_lose_their_values() -> None:
    words = _masked("serve", "--api-key", "sk-1", "--hf-token=hf_2", "--auth-file", "/run/a",
                    "--port", "8000", "--session-cookie", "c3", "--password", "--verbose")
    assert words == ["serve", "--api-key", "secret-1", "--hf-token=secret-2", "--auth-file", "secret-3",
                     "--port", "8000", "--session-cookie", "secret-4", "--password", "--verbose"]


def test_negated_flags_take_no_value() -> None:
    assert _masked("serve", "--no-auth", "model.gguf") == ["serve", "--no-auth", "model.gguf"]


def test_name_value_words_and_url_passwords() -> None:
    words = _masked("env", "DB_PASSWORD=hunter2", "AWS_SECRET_ACCESS_KEY=abc", "HOME=/root",
                    "postgres://moe:pw9@db:5432/x", "https://example.org/path")
    assert words == ["env", "DB_PASSWORD=secret-1", "AWS_SECRET_ACCESS_KEY=secret-2", "HOME=/root",
                     "postgres://moe:secret-3@db:5432/x", "https://example.org/path"]


def test_json_values_under_secret_keys() -> None:
    words = _masked("serve", "--opts", '{"auth": {"user": "svc", "pw": "p"}, "workers": 4, '
                    '"list": ["SESSION_ID=s1", "x"]}')
    assert json.loads(words[2]) == {"auth": {"user": "secret-1", "pw": "secret-2"}, "workers": 4,
                                    "list": ["SESSION_ID=secret-3", "x"]}


def test_environment_options_keep_names_only() -> None:
    words = _masked("serve", "--env", '{"AWS_CA_BUNDLE": "/etc/ssl/ca.pem", "AWS_SECRET_ACCESS_KEY": "k"}',
                    "--env=LOG_LEVEL=debug")
    assert json.loads(words[2]) == {"AWS_CA_BUNDLE": "secret-1", "AWS_SECRET_ACCESS_KEY": "secret-2"}
    assert words[3] == "--env=LOG_LEVEL=secret-3"


def test_json_that_does_not_parse_is_masked_pair_by_pair() -> None:
    words = _masked("serve", '{"token": "cut-sho', '{\\"api_key\\": \\"abc\\", \\"n\\": \\"y\\"}')
    assert words[1] == '{"token": "secret-1'
    assert words[2] == '{\\"api_key\\": \\"secret-2\\", \\"n\\": \\"y\\"}'


def test_command_line_masking_counts_and_works_without_redaction() -> None:
    r = Redactor(enabled=False)
    masked = r.command_line(b"serve\0--token\0t1\0--token\0t1\0--key\0k2\0")
    assert masked == b"serve\0--token\0secret-1\0--token\0secret-1\0--key\0secret-2\0"
    assert r.counts() == {"secret": 2}


def test_bytes_that_are_not_utf8_survive_in_command_lines() -> None:
    r = Redactor()
    assert r.command_line(b"serve\0\xff\xfe\0--token\0\xff1\0") == b"serve\0\xff\xfe\0--token\0secret-1\0"


def test_leading_groups_of_a_known_uuid_are_replaced_too() -> None:
    # systemd looks for a scope's drop-ins under each dash-cut prefix of its name.
    r = Redactor()
    r.learn("vte-spawn-ced04d50-57e7-4bf8-ade7-1dc4aef1e1a1.scope")
    text = r.text("vte-spawn-ced04d50-.scope.d vte-spawn-ced04d50-57e7-4bf8-.scope.d deadbeef-.d")
    assert text == "vte-spawn-uuid-1-.scope.d vte-spawn-uuid-1-.scope.d deadbeef-.d"
    assert r.text("vte-spawn-ced04d50-57e7-4bf8-ade7-1dc4aef1e1a1.scope") == "vte-spawn-uuid-1.scope"


def test_secret_options_in_any_text() -> None:
    # Unit files and evidence: two-dash options from the command lines' list lose their
    # values; kernel text with such words (no two dashes) is left alone.
    r = Redactor()
    text = r.text("ExecStart=/opt/strata/serve --auth a1 --db-pass=p2 --no-auth model --api-key k3 "
                  "--port 80\nKeyringMode=shared\nSpeculation_Store_Bypass:\tvulnerable\n-- Boot 1f --")
    assert text == ("ExecStart=/opt/strata/serve --auth secret-1 --db-pass=secret-2 --no-auth model "
                    "--api-key secret-3 --port 80\nKeyringMode=shared\n"
                    "Speculation_Store_Bypass:\tvulnerable\n-- Boot 1f --")
    assert r.counts() == {"secret": 3}
