"""Secrets in every form the redaction rules name (docs/report.md, "Redaction"): each one
masked in a command line and in a unit file alike, and absent from the Markdown report,
both JSON forms and every member of a bundle; and long lines redacted in linear time."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List

import pytest

from strata_doctor.output.redact import Redactor
from tests.conftest import copy_host, run_cli
from tests.test_report import archive_views

ENGINE_PID = 48213  # seed-box's engine, here found by its command line (MainPID=0)


def _masked(*words: str) -> List[str]:
    return Redactor(enabled=False).command_line("\0".join(words).encode()).decode().split("\0")


def _text(text: str) -> str:
    return Redactor().text(text)


# -- command lines -------------------------------------------------------------------
def test_a_value_that_starts_with_a_dash_is_still_the_value() -> None:
    words = _masked("serve", "--auth-token", "-abc123secret", "--private-key", "-----BEGIN",
                    "--password", "--verbose", "--token", "-v")
    assert words == ["serve", "--auth-token", "secret-1", "--private-key", "secret-2",
                     "--password", "--verbose", "--token", "-v"]


def test_an_empty_value_after_equals_takes_the_next_word() -> None:
    words = _masked("serve", "--password=", "hunter2", "--password", "hunter3", "--port=", "80")
    assert words == ["serve", "--password=", "secret-1", "--password", "secret-2", "--port=", "80"]


def test_bearer_jwt_and_pw_options() -> None:
    words = _masked("serve", "--bearer", "b1", "--jwt=j2", "--pw", "p3", "--pwd", "/opt", "--upward", "u")
    assert words == ["serve", "--bearer", "secret-1", "--jwt=secret-2", "--pw", "secret-3",
                     "--pwd", "/opt", "--upward", "u"]


def test_dash_p_is_a_password_unless_it_is_a_number() -> None:
    words = _masked("mysql", "-pS3cret", "-p", "hunter2", "-p", "8000", "-p8001", "-p", "--host")
    assert words == ["mysql", "-psecret-1", "-p", "secret-2", "-p", "8000", "-p8001", "-p", "--host"]


def test_authorization_headers_in_command_lines() -> None:
    words = _masked("curl", "-H", "Authorization: Bearer eyJhbGciOi.x-y_z", "--header",
                    "authorization: Basic dXNlcjpwYXNz", "-H", "Accept: */*")
    assert words == ["curl", "-H", "Authorization: Bearer secret-1", "--header",
                     "authorization: Basic secret-2", "-H", "Accept: */*"]


def test_shell_words_lose_their_secrets() -> None:
    words = _masked("sh", "-c", "serve --password hunter2 --port 80 && mysql -pS3 db")
    assert words == ["sh", "-c", "serve --password secret-1 --port 80 && mysql -psecret-2 db"]


def test_python_dicts_lose_their_secret_values() -> None:
    words = _masked("serve", "--config", "{'password': 'x y', \"api_key\": \"k\", 'workers': 4}")
    assert words[2] == "{'password': 'secret-1', \"api_key\": \"secret-2\", 'workers': 4}"


# -- any text (unit files, systemctl show, the report) ---------------------------------
def test_exec_lines_are_masked_as_command_lines() -> None:
    text = _text(
        'ExecStart=/opt/serve --token="a b" --auth-token -abc1 --password= hunter2 --pw p4 \\\n'
        "  --api-key k5 -pS6 -p 8000 --opts '{\"auth\": {\"user\": \"svc\"}}'\n"
        "ExecStartPre=/bin/sh -c 'fetch --password p7'\n"
    )
    assert text == (
        'ExecStart=/opt/serve --token="secret-1" --auth-token secret-2 --password= secret-3 '
        '--pw secret-4 \\\n'
        "  --api-key secret-5 -psecret-6 -p 8000 --opts '{\"auth\": {\"user\": \"secret-7\"}}'\n"
        "ExecStartPre=/bin/sh -c 'fetch --password secret-8'\n"
    )


def test_dash_p_in_text_is_a_password_only_after_a_password_tool() -> None:
    # The report quotes its own advice: "nvidia-smi -pm 1" must reach the maintainer whole.
    advice = "Run `nvidia-smi -pm 1`, then `mkdir -p /run/strata` and `docker run -p 8080:80 img`.\n"
    assert _text(advice) == advice
    assert _text("backup: mysqldump -uroot -pS3cret db; sshpass -p hunter2 ssh db\n") == (
        "backup: mysqldump -uroot -psecret-1 db; sshpass -p secret-2 ssh db\n")


def test_environment_lines_use_the_command_line_names() -> None:
    text = _text('Environment=DB_PASS=p1 "API_KEY=two words" SESSION_ID=s3 LOG_LEVEL=debug\n'
                 "KeyringMode=shared\nLoadCredential=tls:/etc/strata/tls.key\n")
    assert text == ('Environment=DB_PASS=secret-1 "API_KEY=secret-2" SESSION_ID=secret-3 LOG_LEVEL=debug\n'
                    "KeyringMode=shared\nLoadCredential=tls:/etc/strata/tls.key\n")


def test_set_credential_loses_its_value_not_its_id() -> None:
    text = _text("SetCredential=db:hunter2\nSetCredentialEncrypted=tls: k4 AAAA==\nLoadCredential=x:/run/x\n")
    assert text == ("SetCredential=db:secret-1\nSetCredentialEncrypted=tls: secret-2\n"
                    "LoadCredential=x:/run/x\n")


def test_url_passwords_and_headers_in_text() -> None:
    text = _text('ExecStartPre=/usr/bin/curl -H "Authorization: Bearer eyJ.a" '
                 "https://u:pass9@models.example.org/m\nnote: Bearer tok_abcdef123 and Basic words\n")
    assert text == ('ExecStartPre=/usr/bin/curl -H "Authorization: Bearer secret-1" '
                    "https://u:secret-3@models.example.org/m\nnote: Bearer secret-2 and Basic words\n")


def test_quoted_values_go_whole() -> None:
    assert _text("password: \"two words\" TOKEN='a b' --api-key \"c d\"") == (
        "password: \"secret-1\" TOKEN='secret-2' --api-key \"secret-3\"")


def test_access_keys_and_webhooks() -> None:
    text = _text(
        "AKIAIOSFODNN7EXAMPLE ASIAABCDEFGHIJKLMNOP AKIASHORT xAKIAIOSFODNN7EXAMPLE\n"
        "https://hooks.slack.com/services/T0001/B0002/XXXXYYYYZZZZ "
        "https://discord.com/api/webhooks/123456789012345678/tok-EN_1 "
        "https://ci.example.org/webhook/0123456789abcdefXYZ/run https://ci.example.org/webhook/short\n"
    )
    assert text == (
        "secret-1 secret-2 AKIASHORT xAKIAIOSFODNN7EXAMPLE\n"
        "https://hooks.slack.com/services/secret-3 "
        "https://discord.com/api/webhooks/123456789012345678/secret-4 "
        "https://ci.example.org/webhook/secret-5/run https://ci.example.org/webhook/short\n"
    )


def test_dicts_and_json_in_text() -> None:
    text = _text("{'password': 'x', \"api_key\": \"y\", 'n': 'z'} \"token\": \"t t\" \"keyring\": \"kept\"")
    assert text == ("{'password': 'secret-1', \"api_key\": \"secret-2\", 'n': 'z'} "
                    "\"token\": \"secret-3\" \"keyring\": \"kept\"")


# -- long lines ---------------------------------------------------------------------
LONG = 8 * 1024 * 1024


@pytest.mark.parametrize("unit", ["-", "--a", "token", "x=", "a ", "Exec", '{"a": "'])
def test_a_long_line_is_redacted_whole(unit: str) -> None:
    # Each unit repeated over a line once sent a pattern backtracking over the rest of the
    # line from each place (2 MiB of dashes: hours); the redaction must end, with the
    # secret at its end masked and the rest kept. 2 MiB keeps the suite short.
    filler = unit * (LONG // 4 // len(unit))
    r = Redactor()
    assert r.text(filler + "\n--token t1\n") == filler + "\n--token secret-1\n"
    assert r.command_line((filler + "\0--token\0t1").encode()) == (filler + "\0--token\0secret-1").encode()


def test_an_8_mib_exec_line_is_redacted_whole() -> None:
    words = "w " * (LONG // 2)
    r = Redactor()
    masked = r.text(f"ExecStart=/opt/serve {words}--token t1\n")
    assert masked == f"ExecStart=/opt/serve {words}--token secret-1\n"


# -- every output, every member of the bundle -----------------------------------------
CMDLINE_SECRETS: Dict[str, str] = {
    "--auth-token": "-PLANTEDdash1", "--private-key": "-PLANTEDdash2", "--password=": "PLANTEDsplit1",
    "--password": "PLANTEDpw1", "--bearer": "PLANTEDbearer1", "--jwt": "PLANTEDjwt1", "--pw": "PLANTEDpw2",
    "-p": "PLANTEDmysql2", "-H": "Authorization: Bearer eyPLANTEDbearer2",
    "--header": "Authorization: Basic PLANTEDbasic1",
    "--config": "{'password': 'PLANTEDdict1', \"api_key\": \"PLANTEDdict2\"}",
    "--notify": "https://hooks.slack.com/services/T0PLANTED/B0PLANTED/PLANTEDslack1",
    "--hook": "https://discord.com/api/webhooks/123456789012345678/PLANTEDdiscord1",
    "--ci": "https://n8n.example.org/webhook/PLANTEDgenericHook0123456789",
    "--s3": "AKIAPLANTEDAKIA00001", "-c": "fetch --password PLANTEDshell1",
}
"""The engine's command line: option -> value; each value holds a planted string."""
UNIT_LINES = (
    'ExecStartPre=/usr/bin/curl -H "Authorization: Bearer eyPLANTEDunitbearer" '
    "-H 'Authorization: Basic PLANTEDunitbasic' https://fetch:PLANTEDunitURL@models.example.org/m",
    'ExecStartPre=/opt/strata/fetch --token="PLANTED unitquoted" --auth-token -PLANTEDunitdash '
    "--password= PLANTEDunitsplit --jwt PLANTEDunitjwt --pw PLANTEDunitpw --bearer PLANTEDunitbearer2",
    "ExecStartPost=/usr/bin/mysql -pPLANTEDunitmysql -e select",
    "ExecStartPost=/usr/bin/sshpass -p PLANTEDunitsshpass ssh db",
    "ExecStartPost=/opt/strata/notify https://hooks.slack.com/services/T0UNIT/B0UNIT/PLANTEDunitslack "
    "https://discord.com/api/webhooks/987654321/PLANTEDunitdiscord "
    "https://ci.example.org/webhook/PLANTEDunitGenericHook0123456",
    "ExecStartPost=/opt/strata/cfg --opts '{\"token\": \"PLANTEDunitjson\"}' "
    "--dict \"{'password': 'PLANTEDunitdict'}\"",
    "Environment=AWS_ACCESS_KEY_ID=AKIAPLANTEDUNIT00003 DB_PASS=PLANTEDunitdbpass "
    '"API_KEY=PLANTED unitapikey"',
    "Environment=HF_TOKEN=PLANTEDunithf ACCESS_KEY=PLANTEDunitaccess SECRET=PLANTEDunitsecret",
    "SetCredential=dbpass:PLANTEDunitcred",
    "ExecStartPre=/bin/sh -c \"serve --password PLANTEDunitshell\"",
    "LoadCredential=tls:/etc/strata/tls.key",
)
"""Lines added to the engine's unit file, each with one or more planted strings."""


def _planted_host(tmp_path: Path) -> Path:
    root = copy_host("seed-box", tmp_path / "h")
    proc = root / "proc" / str(ENGINE_PID)
    words = [w for w in proc.joinpath("cmdline").read_bytes().decode().split("\0") if w]
    for option, value in CMDLINE_SECRETS.items():
        words += [option, value]
    proc.joinpath("cmdline").write_bytes(("\0".join([*words, "-p", "8000"]) + "\0").encode())
    proc.joinpath("environ").write_bytes(b"HF_TOKEN=PLANTEDenv1\0HOME=/opt/strata\0")
    unit = root / "etc/systemd/system/strata.service"
    text = unit.read_text().replace("[Install]", "\n".join(UNIT_LINES) + "\n\n[Install]")
    unit.write_text(text)
    # As if started by hand: the engine search reads every command line, so the engine's
    # goes into the bundle (masked), as it would on such a host.
    show = root / ".strata-doctor/commands/systemctl-show-strata.service.txt"
    show.write_text(show.read_text().replace(f"MainPID={ENGINE_PID}", "MainPID=0"))
    return root


def _planted_strings() -> List[str]:
    every = "\n".join([*CMDLINE_SECRETS.values(), *UNIT_LINES])
    found = re.findall(r"PLANTED[A-Za-z0-9]*|AKIAPLANTED\w+", every)
    return sorted(set(found) - {"PLANTED"} | {"PLANTED unit", "PLANTEDenv1"})


def _member(views: Dict[str, bytes], suffix: str) -> bytes:
    return next(v for w, v in views.items() if w.endswith(suffix) and not w.startswith("member name"))


def _run(args: List[str]) -> bytes:
    result = run_cli(args)
    assert result.exit_code in (0, 1), result.stderr
    return result.stdout.encode()


def test_planted_secrets_reach_no_output_and_no_member(tmp_path: Path) -> None:
    root = _planted_host(tmp_path)
    bundle = tmp_path / "b.tar.gz"
    views = {
        "Markdown": _run(["report", "--root", str(root), "--bundle", str(bundle)]),
        "report JSON": _run(["report", "--root", str(root), "--format", "json"]),
        "check JSON": _run(["check", "--root", str(root), "--format", "json"]),
        **archive_views(bundle),
    }
    assert any("strata.service" in where for where in views) and any("cmdline" in w for w in views)
    planted = _planted_strings()
    assert len(planted) > 40
    for where, content in views.items():
        for secret in planted:
            assert secret.encode() not in content, f"{secret!r} survived in {where}"
    # What is not a secret stays: the credential's path, the port after -p, the engine.
    unit = _member(views, "system/strata.service")
    assert b"LoadCredential=tls:/etc/strata/tls.key" in unit and b"SetCredential=dbpass:secret-" in unit
    cmdline = _member(views, f"{ENGINE_PID}/cmdline")
    assert cmdline.split(b"\0")[:2] == [b"/opt/strata/venv/bin/python", b"/opt/strata/serve/server.py"]
    assert b"-p\x008000" in cmdline
    manifest = json.loads(_member(views, "manifest.json"))
    assert manifest["redactions"]["secret"] >= len(planted) - 1


def test_command_line_forms_are_masked_without_redaction_too(tmp_path: Path) -> None:
    root = _planted_host(tmp_path)
    bundle = tmp_path / "b.tar.gz"
    _run(["report", "--root", str(root), "--bundle", str(bundle), "--no-redact"])
    views = archive_views(bundle)
    cmdline = _member(views, f"{ENGINE_PID}/cmdline")
    for value in CMDLINE_SECRETS.values():
        for secret in re.findall(r"PLANTED\w*|AKIAPLANTED\w+", value):
            assert secret.encode() not in cmdline, secret
