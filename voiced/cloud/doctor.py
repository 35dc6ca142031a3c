"""``voiced doctor``'s view of the cloud: configured or not, key file, reachability."""

from __future__ import annotations

from voiced.cloud.config import CloudConfig
from voiced.cloud.errors import CloudErrorKind
from voiced.cloud.router import CloudRouter, CloudState

__all__ = ["doctor_lines"]

_FIXES = {
    CloudErrorKind.DNS: "check the host name in cloud.base_url and the device's DNS",
    CloudErrorKind.REFUSED: "check the port in cloud.base_url and that the service runs",
    CloudErrorKind.TIMEOUT: "check the network path (firewall, captive portal) or raise cloud.probe_budget_s",
    CloudErrorKind.TLS: "set cloud.ca_file to the CA that signed the server's certificate, or fix the certificate",
    CloudErrorKind.CONNECTION: "check the network path to cloud.base_url",
    CloudErrorKind.AUTH: "put a valid key in cloud.api_key_file",
    CloudErrorKind.CLIENT_ERROR: "check cloud.base_url and cloud.probe_path",
    CloudErrorKind.SERVER_ERROR: "the service fails; voiced stays local until it recovers",
    CloudErrorKind.MALFORMED: "cloud.base_url does not look like an OpenAI-compatible service",
    CloudErrorKind.DISABLED: "check cloud.api_key_file and cloud.ca_file",
}


def doctor_lines(config: CloudConfig, probe: bool = True) -> list[str]:
    """Report lines in the doctor's ``[ ok ]`` / ``[warn]`` format (the cloud is optional:
    nothing here is a FAIL); with ``probe``, one real probe bounded by ``probe_budget_s``."""
    router = CloudRouter(config)
    try:
        status = router.status()
        if status.state is CloudState.DISABLED:
            return _lines("ok", status.detail)
        if status.state is CloudState.UNUSABLE:
            return _lines("warn", f"{status.detail}: the cloud is disabled until it is fixed",
                          "create the file (e.g. a systemd credential) or remove the key from [cloud]")
        uses = f"asr {'on (audio may leave the device)' if config.asr else 'off (audio stays on the device)'}, " \
               f"intent {'on' if config.intent else 'off'}"
        if not probe:
            return _lines("ok", f"{config.root} configured ({uses}); not probed")
        result = router.probe()
        if result.up:
            return _lines("ok", f"{config.root} {result.describe()}; {uses}")
        fix = _FIXES.get(result.error.kind) if result.error is not None else None
        return _lines("warn", f"{config.root} {result.describe()}; voiced stays local", fix)
    finally:
        router.close()


def _lines(status: str, message: str, fix: str | None = None) -> list[str]:
    out = [f"[{status:^4}] cloud: {message}"]
    if fix:
        out.append(f"       fix: {fix}")
    return out
