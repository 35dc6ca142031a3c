"""[cloud] settings: safe defaults, validation that names the key, no file or network at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from voiced.cloud import CloudConfig
from voiced.configfile import section_from_dict
from voiced.errors import ConfigError


def test_defaults_keep_everything_on_the_device() -> None:
    c = CloudConfig()
    assert c.enabled is False
    assert c.asr is False  # audio leaves the device only when asked for
    assert c.publish_corrections is False
    assert c.probe_budget_s == 2.5


def test_from_a_toml_table_with_nested_backoff(tmp_path: Path) -> None:
    c = section_from_dict(CloudConfig, {
        "enabled": True, "base_url": "https://cloud.example", "api_key_file": str(tmp_path / "absent"),
        "ca_file": str(tmp_path / "absent-ca.pem"), "backoff": {"initial": 1, "maximum": 60},
        "failure_threshold": 5,
    }, "cloud", "voiced.toml")
    # Missing key and CA files are not errors at load: they disable the cloud when it is needed.
    assert c.api_key_file == tmp_path / "absent"
    assert c.backoff.initial == 1.0
    assert c.root == "https://cloud.example"


@pytest.mark.parametrize(("values", "key"), [
    ({"enabled": True}, "cloud.base_url"),
    ({"enabled": True, "base_url": "ftp://x"}, "cloud.base_url"),
    ({"enabled": True, "base_url": "https://x/v1"}, "cloud.base_url"),
    ({"enabled": True, "base_url": "https://user:pw@x"}, "cloud.base_url"),
    ({"enabled": True, "base_url": "https://x:99999"}, "cloud.base_url"),
    ({"probe_budget_s": 0}, "cloud.probe_budget_s"),
    ({"local_budget_s": -1}, "cloud.local_budget_s"),
    ({"local_confidence_threshold": 1.5}, "cloud.local_confidence_threshold"),
    ({"failure_threshold": 0}, "cloud.failure_threshold"),
    ({"workers": 0}, "cloud.workers"),
    ({"asr_model": " "}, "cloud.asr_model"),
    ({"probe_path": "v1/models"}, "cloud.probe_path"),
])
def test_malformed_values_name_the_key(values: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        section_from_dict(CloudConfig, values, "cloud", "voiced.toml")
    assert err.value.key == key
    assert "voiced.toml" in str(err.value)


def test_unknown_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="cloud.verify"):
        section_from_dict(CloudConfig, {"verify": False}, "cloud")  # TLS verification cannot be turned off
