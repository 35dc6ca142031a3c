"""The model store: install from a directory or tarball (a USB stick), list, verify, remove; the CLI."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from voiced.errors import ConfigError, ModelError
from voiced.models.cli import main
from voiced.models.manifest import (
    INSTALL_RECORD,
    Manifest,
    Trust,
    manifest_path,
    sha256_file,
    verify_model_file,
)
from voiced.models.store import ModelStore, default_root


def model_dir(root: Path, name: str = "sherpa-test") -> Path:
    d = root / name
    d.mkdir(parents=True)
    for part in ("encoder", "decoder", "joiner"):
        (d / f"{part}.onnx").write_bytes(f"{part} weights".encode() * 100)
    (d / "tokens.txt").write_text("<blk> 0\n<sos/eos> 1\n<unk> 2\n")
    return d


def tarball(src: Path, path: Path, mode: str) -> Path:
    with tarfile.open(path, mode) as tar:
        tar.add(src, arcname=src.name)
    return path


def test_default_root_follows_systemd_then_xdg(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", f"{tmp_path}/state:{tmp_path}/other")
    assert default_root() == tmp_path / "state" / "models"
    monkeypatch.delenv("STATE_DIRECTORY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_root() == tmp_path / "xdg" / "voiced" / "models"


def test_install_list_verify_remove(tmp_path) -> None:
    store = ModelStore(tmp_path / "store")
    model = store.install(model_dir(tmp_path / "usb"))
    assert model.name == "sherpa-test" and model.kind == "asr" and len(model.files) == 4
    assert [m.name for m in store.list()] == ["sherpa-test"]
    assert store.verify("sherpa-test").ok and store.verify("sherpa-test").checked == 4
    # the install record makes the daemon's load-time check work for files without a manifest
    assert verify_model_file(model.path / "encoder.onnx").trust is Trust.VERIFIED
    with pytest.raises(ModelError, match="already installed"):
        store.install(tmp_path / "usb" / "sherpa-test")
    store.install(tmp_path / "usb" / "sherpa-test", force=True)
    store.remove("sherpa-test")
    assert store.list() == [] and not (tmp_path / "store" / "sherpa-test").exists()


def test_verify_names_a_corrupted_file_and_both_checksums(tmp_path) -> None:
    store = ModelStore(tmp_path / "store")
    model = store.install(model_dir(tmp_path / "usb"))
    recorded = model.files["joiner.onnx"]["sha256"]
    joiner = model.path / "joiner.onnx"
    joiner.write_bytes(joiner.read_bytes()[:-1] + b"X")
    result = store.verify("sherpa-test")
    assert not result.ok and len(result.problems) == 1
    assert str(joiner) in result.problems[0] and recorded in result.problems[0] and sha256_file(joiner) in result.problems[0]
    with pytest.raises(ModelError, match="joiner.onnx: sha256"):
        verify_model_file(joiner)


@pytest.mark.parametrize(("suffix", "mode"), [(".tar.gz", "w:gz"), (".tar.bz2", "w:bz2")])
def test_install_a_tarball_from_a_usb_stick(tmp_path, suffix, mode) -> None:
    archive = tarball(model_dir(tmp_path / "build", "zipformer-en"), tmp_path / f"release{suffix}", mode)
    model = ModelStore(tmp_path / "store").install(archive)
    assert model.name == "zipformer-en"  # the single top folder names it and is stripped
    assert sorted(model.files) == ["decoder.onnx", "encoder.onnx", "joiner.onnx", "tokens.txt"]
    assert model.source == str(archive.resolve())


def test_unsafe_archives_are_refused(tmp_path) -> None:
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    store = ModelStore(tmp_path / "store")
    with pytest.raises(ModelError, match="cannot unpack"):
        store.install(evil)
    assert not (tmp_path / "escaped.txt").exists() and store.list() == []


def test_a_corrupt_quantized_model_is_refused_at_install(tmp_path) -> None:
    d = tmp_path / "usb" / "vad"
    d.mkdir(parents=True)
    model = d / "silero_vad.int8.onnx"
    model.write_bytes(b"int8 weights" * 50)
    Manifest(model=model.name, sha256=sha256_file(model), size=model.stat().st_size,
             source={"file": "silero_vad.onnx"}).write(manifest_path(model))
    model.write_bytes(b"int8 weightz" * 50)
    store = ModelStore(tmp_path / "store")
    with pytest.raises(ModelError, match="silero_vad.int8.onnx: sha256 .* does not match"):
        store.install(d)
    assert store.list() == []


def test_names_are_checked(tmp_path) -> None:
    store = ModelStore(tmp_path / "store")
    with pytest.raises(ConfigError, match="not a valid model name"):
        store.install(model_dir(tmp_path / "usb"), name="../outside")
    with pytest.raises(ModelError, match="not installed"):
        store.remove("nothing-here")


def test_cli(tmp_path, capsys) -> None:
    store = str(tmp_path / "store")
    src = model_dir(tmp_path / "usb")
    assert main(["--store", store, "install", str(src), "--name", "asr-en"]) == 0
    assert main(["--store", store, "list", "--json"]) == 0
    out = capsys.readouterr().out
    listed = json.loads(out[out.index("["):])
    assert listed[0]["name"] == "asr-en" and listed[0]["files"] == 4
    assert main(["--store", store, "verify"]) == 0 and "asr-en: OK (4 files)" in capsys.readouterr().out
    (tmp_path / "store" / "asr-en" / "tokens.txt").write_text("changed\n")
    assert main(["--store", store, "verify", "asr-en"]) == 1
    assert "asr-en: FAILED" in capsys.readouterr().out
    assert main(["--store", store, "pull", "sherpa-onnx-streaming-zipformer-en-2023-06-26"]) == 1
    assert "--insecure-skip-checksum" in capsys.readouterr().err  # refused: no checksum known, nothing fetched
    assert main(["--store", store, "catalog"]) == 0 and "silero-vad-v5" in capsys.readouterr().out
    assert main(["--store", store, "remove", "asr-en"]) == 0
    assert not (tmp_path / "store" / "asr-en" / INSTALL_RECORD).exists()


def test_a_store_that_is_a_file_is_named_not_a_traceback(tmp_path, capsys) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a store\n")
    src = model_dir(tmp_path / "usb")
    with pytest.raises(ModelError, match=re.escape(f"model store {afile}: not a directory")):
        ModelStore(afile).install(src)
    with pytest.raises(ModelError, match="not a directory"):
        ModelStore(afile).list()  # not "no models installed"
    with pytest.raises(ModelError, match=re.escape(f"cannot create the model store {afile / 'models'}: ")):
        ModelStore(afile / "models").install(src)
    for action in (["install", str(src)], ["list"], ["verify"]):
        assert main(["--store", str(afile), *action]) == 1
        assert capsys.readouterr().err == f"voiced models: --store: {afile} is not a directory\n"


def test_a_source_holding_the_store_is_refused_before_copying(tmp_path, capsys) -> None:
    mdir = model_dir(tmp_path, "mdir")
    store = ModelStore(mdir / "store")  # `--store mdir/store install mdir`
    with pytest.raises(ModelError, match=re.escape(f"{mdir}: contains the model store {store.root}")):
        store.install(mdir)
    store.install(model_dir(tmp_path / "usb"))
    # `--store store3 install store3`: one line, no copy of the copy
    assert main(["--store", str(store.root), "install", str(store.root)]) == 1
    err = capsys.readouterr().err
    assert err == f"voiced models: {store.root}: contains the model store {store.root}; install from a directory outside it\n"
    # a link inside the source that leads to the store
    linked = model_dir(tmp_path / "usb", "linked")
    (linked / "more").symlink_to(mdir)
    with pytest.raises(ModelError, match=re.escape(f"{linked / 'more'}: contains the model store")):
        store.install(linked)
    with pytest.raises(ModelError, match=re.escape(f"{store.root / 'sherpa-test'}: is inside the model store")):
        store.install(store.root / "sherpa-test", name="copy")
    assert [m.name for m in store.list()] == ["sherpa-test"]
    assert [p.name for p in store.root.iterdir()] == ["sherpa-test"]  # no staging left behind


def test_a_dangling_link_or_a_link_loop_in_the_source_is_named(tmp_path, capsys) -> None:
    src = model_dir(tmp_path / "usb")
    store = ModelStore(tmp_path / "store")
    (src / "tokens-old.txt").symlink_to(tmp_path / "gone.txt")
    assert main(["--store", str(store.root), "install", str(src)]) == 1
    assert capsys.readouterr().err == (f"voiced models: {src / 'tokens-old.txt'}: dangling symbolic link to"
                                       f" {tmp_path / 'gone.txt'} (No such file or directory);"
                                       " remove it or put its target in place\n")
    (src / "tokens-old.txt").unlink()
    (src / "again").symlink_to(src)  # copytree would follow it until the path is too long
    with pytest.raises(ModelError, match=re.escape(f"{src / 'again'}: symbolic link loop")):
        store.install(src)
    (src / "again").unlink()
    assert store.install(src).name == "sherpa-test"


def read_only_copy(src: Path, dest: Path) -> Path:
    """``src`` copied to ``dest`` with the modes of a read-only share: r-x directories, r-- files."""
    shutil.copytree(src, dest)
    for path in sorted(dest.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)
    dest.chmod(0o555)
    return dest


def test_a_read_only_source_installs_as_an_owner_writable_copy(tmp_path) -> None:
    src = model_dir(tmp_path / "build")
    (src / "int8").mkdir()
    (src / "int8" / "encoder.int8.onnx").write_bytes(b"int8 weights" * 10)
    src = read_only_copy(src, tmp_path / "usb" / "sherpa-ro")
    model = ModelStore(tmp_path / "store").install(src)
    assert (model.path / INSTALL_RECORD).is_file() and len(model.files) == 5
    for path in (model.path, *model.path.rglob("*")):
        want = stat.S_IRWXU if path.is_dir() else stat.S_IRUSR | stat.S_IWUSR
        assert path.stat().st_mode & want == want, f"{path}: {stat.filemode(path.stat().st_mode)}"
    assert stat.S_IMODE(src.stat().st_mode) == 0o555  # the source is left as it was


def as_non_root(argv: list[str]) -> list[str]:
    """``argv`` run without the capabilities that let root ignore file modes (as the tester did)."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv (util-linux) is missing: cannot drop CAP_DAC_OVERRIDE")
    caps = "-dac_override,-dac_read_search,-fowner"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", "--", *argv]


def test_a_non_root_user_installs_and_removes_a_read_only_real_model(tmp_path, models) -> None:
    src = read_only_copy(models / "silero_vad_v6", tmp_path / "share" / "silero_vad_v6")
    voiced_models = [sys.executable, "-m", "voiced.models", "--store", str(tmp_path / "store")]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(as_non_root([*voiced_models, "install", str(src)]), capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("installed silero_vad_v6: 3 files")
    done = subprocess.run(as_non_root([*voiced_models, "remove", "silero_vad_v6"]), capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr  # r-x directories could only be removed by root
    assert list((tmp_path / "store").iterdir()) == []


@pytest.mark.parametrize(("record", "problem"), [
    ({"files": {"x": "str"}}, "\"files\" entry 'x' is not"),
    ({"files": {"tokens.txt": {"sha256": 7, "size": 1}}}, "\"files\" entry 'tokens.txt' is not"),
    ({"files": {"tokens.txt": {"sha256": "ab", "size": "big"}}}, "\"files\" entry 'tokens.txt' is not"),
    ({"files": {"../../etc/passwd": {"sha256": "ab", "size": 1}}}, "\"files\" entry '../../etc/passwd' is not a path"),
    ({"files": ["encoder.onnx"]}, '"files" is missing or not an object'),
    ({"kind": ["asr"], "files": {}}, '"kind" is not a string'),
    (["files"], "not a JSON object"),
])
def test_a_wrong_typed_install_record_is_named_not_a_traceback(tmp_path, capsys, record, problem) -> None:
    store = ModelStore(tmp_path / "store")
    model = store.install(model_dir(tmp_path / "usb"))
    (model.path / INSTALL_RECORD).write_text(json.dumps(record))
    named = f"{model.path / INSTALL_RECORD}: damaged install record ({problem}"
    with pytest.raises(ModelError, match=re.escape(named)):
        store.get("sherpa-test")
    assert main(["--store", str(store.root), "list"]) == 0
    assert main(["--store", str(store.root), "verify", "sherpa-test"]) == 1
    said = capsys.readouterr()
    assert named in said.out + said.err and "Traceback" not in said.err


def test_a_model_with_a_missing_or_corrupt_record_fails_verify_and_is_listed_as_damaged(tmp_path, capsys) -> None:
    store = ModelStore(tmp_path / "store")
    src = model_dir(tmp_path / "usb")
    for name in ("a", "b", "c"):
        store.install(src, name=name)
    (store.root / "b" / INSTALL_RECORD).write_text("{\n")  # `echo "{" > store/b/voiced-model.json`
    (store.root / "c" / INSTALL_RECORD).unlink()
    assert main(["--store", str(store.root), "verify"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "a: OK (4 files)"
    assert out[1:3] == ["b: FAILED", f"  {store.root / 'b' / INSTALL_RECORD}: missing or unreadable install record"
                        " (Expecting property name enclosed in double quotes: line 2 column 1 (char 2))"]
    assert out[3] == "c: FAILED" and out[4].startswith(f"  {store.root / 'c' / INSTALL_RECORD}: missing or unreadable")
    assert main(["--store", str(store.root), "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in listed] == [["a", "asr"], ["b", "DAMAGED"], ["c", "DAMAGED"]]
    assert "`voiced models remove b` and install it again" in listed[1]
    assert main(["--store", str(store.root), "list", "--json"]) == 0
    damaged = {m["name"]: m["damaged"] for m in json.loads(capsys.readouterr().out)}
    assert damaged["a"] is None and damaged["b"].startswith(str(store.root / "b" / INSTALL_RECORD))
    assert main(["--store", str(store.root), "remove", "b"]) == 0  # the way out: remove, install again
    assert [m.name for m in store.list()] == ["a"] and not (store.root / "b").exists()


def big_model_dir(root: Path) -> Path:
    """A model directory whose copy and hashing take long enough to catch an install in the middle."""
    src = model_dir(root)
    with open(src / "encoder.onnx", "r+b") as f:
        f.truncate(128 << 20)  # sparse: costs no disk until copied
    return src


def caught_mid_copy(store: Path, src: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """``voiced models install src`` in another process, stopped (SIGSTOP) with its copy under way."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    before = set(store.glob(".staging-*"))
    for _attempt in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "voiced.models", "--store", str(store), "install", str(src),
                                 *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            staging = [p for p in set(store.glob(".staging-*")) - before if (p / "model").exists()]
            if staging:
                proc.send_signal(signal.SIGSTOP)
                if staging[0].exists():
                    return proc, staging[0]
                proc.send_signal(signal.SIGCONT)  # stopped too late: finished meanwhile
            time.sleep(0.001)
        proc.kill()
        proc.communicate()
        shutil.rmtree(store / "sherpa-test", ignore_errors=True)
    pytest.fail("could not catch an install in the middle of its copy in 3 attempts")


def test_a_killed_install_leaves_staging_that_the_next_install_removes_but_not_a_live_one(tmp_path, capsys) -> None:
    store = ModelStore(tmp_path / "store")
    src = big_model_dir(tmp_path / "usb")
    killed, dead = caught_mid_copy(store.root, src)
    killed.kill()  # SIGKILL: no clean-up runs
    killed.communicate()
    assert dead.is_dir()
    assert main(["--store", str(store.root), "list"]) == 0
    assert f"voiced models: note: {dead} was left by an interrupted install or remove (" in capsys.readouterr().err
    live_proc, live = caught_mid_copy(store.root, src, "--name", "live")  # stopped, alive: its staging is in use
    try:
        store.install(model_dir(tmp_path / "usb2", "small"))
        assert not dead.exists() and live.is_dir()
        assert main(["--store", str(store.root), "verify"]) == 0
        assert "left by an interrupted" not in capsys.readouterr().err
    finally:
        live_proc.send_signal(signal.SIGCONT)
    out, err = live_proc.communicate(timeout=120)
    assert live_proc.returncode == 0, err
    assert [m.name for m in store.list()] == ["live", "small"]
    assert not list(store.root.glob(".staging-*"))


def test_staging_without_a_lock_is_removed_only_once_an_hour_old(tmp_path) -> None:
    store = ModelStore(tmp_path / "store")
    old, young = store.root / ".staging-k2j4h1a8", store.root / ".staging-9zq0w7xe"  # as a voiced before the lock named them
    for staging in (old, young):
        (staging / "model").mkdir(parents=True)
        (staging / "model" / "encoder.onnx").write_bytes(b"half a copy")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    store.install(model_dir(tmp_path / "usb"))
    assert not old.exists() and young.is_dir()  # young: maybe an install being created this instant
    assert store.leftovers() == []


def test_a_quantized_silero_directory_is_vad_and_a_piper_voice_is_tts(tmp_path, models) -> None:
    vad = tmp_path / "usb" / "silero_vad_v5"
    shutil.copytree(models / "silero_vad_v5", vad)
    int8 = vad / "silero_vad.int8.onnx"  # stands in for voiced-quantize's output; the manifest is real
    shutil.copyfile(vad / "silero_vad.onnx", int8)
    Manifest(model=int8.name, sha256=sha256_file(int8), size=int8.stat().st_size,
             source={"file": "silero_vad.onnx"}).write(manifest_path(int8))
    store = ModelStore(tmp_path / "store")
    assert store.install(vad).kind == "vad"  # not "tts" for silero_vad.int8.onnx.json
    voice = tmp_path / "usb" / "lessac"
    voice.mkdir()
    shutil.copyfile(models / "piper_config_en_US-lessac-medium" / "en_US-lessac-medium.onnx.json",
                    voice / "en_US-lessac-medium.onnx.json")
    (voice / "en_US-lessac-medium.onnx").write_bytes(b"voice weights")
    assert store.install(voice).kind == "tts"
