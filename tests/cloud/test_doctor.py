"""``voiced doctor``'s cloud lines, and the benchmark's figures (shape only, never values)."""

from __future__ import annotations

from pathlib import Path

import pytest

from voiced.bench.cloud import bench_cloud
from voiced.cloud import CloudConfig, doctor_lines

from .conftest import KEY, SHORT, BlackHole, FakeCloud, Mode, cloud_config


def test_disabled() -> None:
    lines = doctor_lines(CloudConfig())
    assert lines == ["[ ok ] cloud: cloud.enabled = false: everything stays on this device"]


def test_reachable(fake: FakeCloud) -> None:
    [line] = doctor_lines(cloud_config(fake.url, asr=False))
    assert line.startswith("[ ok ] cloud: http://127.0.0.1") and "reachable (HTTP 200" in line
    assert "audio stays on the device" in line


def test_missing_key_file_is_a_warning(fake: FakeCloud, tmp_path: Path) -> None:
    lines = doctor_lines(cloud_config(fake.url, api_key_file=tmp_path / "nope"))
    assert lines[0].startswith("[warn] cloud:") and "does not exist" in lines[0]
    assert lines[1].startswith("       fix:")
    assert fake.seen == []


def test_unreachable_is_a_warning_with_a_fix(closed_url: str, black_hole: BlackHole) -> None:
    lines = doctor_lines(cloud_config(closed_url))
    assert lines[0].startswith("[warn] cloud:") and "refused" in lines[0]
    assert "port" in lines[1]
    lines = doctor_lines(cloud_config(black_hole.url, probe_budget_s=SHORT))
    assert "timeout" in lines[0] and "probe_budget_s" in lines[1]


@pytest.mark.parametrize(("mode", "said", "fix"), [
    (None, "reached, but it refused the API key (HTTP 401 in ", "api_key_file"),
    (Mode.REDIRECT, "reached, but it redirects, and redirects are not followed (HTTP 302 in ", "base_url"),
    (Mode.SERVER_ERROR, "reached, but the service failed (HTTP 500 in ", "service fails"),
])
def test_a_server_that_answers_is_reached_not_unreachable(servers: list, tmp_path: Path, mode: Mode | None,
                                                          said: str, fix: str) -> None:
    fake = FakeCloud(key=KEY).start()
    servers.append(fake)
    (tmp_path / "key").write_text("sk-wrong\n" if mode is None else KEY)
    if mode is not None:
        fake.mode = mode
    lines = doctor_lines(cloud_config(fake.url, api_key_file=tmp_path / "key"))
    assert lines[0].startswith(f"[warn] cloud: {fake.url} {said}"), lines
    assert "unreachable" not in lines[0] and fix in lines[1]


def test_not_probed_on_request(closed_url: str) -> None:
    assert doctor_lines(cloud_config(closed_url), probe=False)[0].endswith("not probed")


def test_benchmark_reports_every_figure() -> None:
    figures = bench_cloud(repeats=2, black_hole_repeats=1, probe_budget_s=0.2)
    for key in ("probe_up_cold", "probe_up_cached_us", "probe_down_closed", "probe_black_holed",
                "decision_us", "submit_us", "intent_round_trip"):
        assert set(figures[key]) == {"median", "p95", "max", "n"}, key
