"""The rehearsal's secrets check (darling_nemo/rehearsal/secrets_check.py) by hand: the
secrets it plants pass any deny-list of names, and it finds each one raw, URL-encoded and
base64-encoded at any alignment inside a record. No Ray needed; the rehearsal
(test_rehearsal.py, the math path) runs it against Ray's own tables."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from darling_nemo.judges.auth import is_secret_name
from darling_nemo.nemo_rl.ray_env import ray_env_vars
from darling_nemo.rehearsal.secrets_check import (
    encodings,
    find_secrets,
    plant_secrets,
    secret_values,
)


def test_the_planted_secrets_pass_the_deny_list_and_one_is_short():
    planted = plant_secrets()
    assert {p.name for p in planted} >= {"HTTPS_PROXY", "DATABASE_URL", "MYTOKEN"}
    assert not any(is_secret_name(p.name) for p in planted)  # only an allow-list stops them
    assert any(len(p.secret) < 8 for p in planted)
    assert plant_secrets() != planted  # fresh each rehearsal: never found by chance
    for p in planted:
        assert p.secret in p.value


@pytest.mark.parametrize("prefix", [b"", b"x", b"xy", b"long prefix "])
def test_a_secret_is_found_raw_url_encoded_and_base64_encoded_anywhere(prefix):
    for p in plant_secrets():
        wanted = {p.name: p.secret}
        records = {
            "raw": prefix + p.value.encode(),
            "URL-encoded": prefix + quote(p.value, safe="").encode(),
            "base64-encoded": base64.b64encode(prefix + p.value.encode() + b" tail"),
            "urlsafe base64": base64.urlsafe_b64encode(prefix + p.value.encode()),
            "in JSON": json.dumps({"env_vars": {p.name: p.value}}).encode(),
        }
        for what, blob in records.items():
            found, count = find_secrets(wanted, iter([(what, blob)]))
            assert found is not None and p.name in found and what in found, (what, found)
            assert p.secret not in found and count == 1


def test_nothing_is_found_where_the_allow_list_left_only_the_proxy_host():
    planted = plant_secrets()
    env = {p.name: p.value for p in planted} | {"DARLING_JUDGE_TOKEN": "j" * 43}
    wanted = secret_values(env, planted)
    assert set(wanted) == {*(p.name for p in planted), "DARLING_JUDGE_TOKEN"}
    # what Ray gets under the allow-list: the proxy's host and port, no password
    record = json.dumps({"env_vars": ray_env_vars(env)}).encode()
    assert b"proxy.invalid:3128" in record
    assert find_secrets(wanted, iter([("Ray's job table", record)])) == (None, 1)
    # what it got under the deny-list: every planted value
    old = json.dumps({"env_vars": {k: v for k, v in env.items() if not is_secret_name(k)}})
    found, _ = find_secrets(wanted, iter([("Ray's job table", old.encode())]))
    assert found is not None and "Ray's job table" in found


def test_every_form_is_long_enough_not_to_be_found_by_chance():
    for p in plant_secrets():
        assert min(len(form) for form in encodings(p.secret)) >= 7, p.name
