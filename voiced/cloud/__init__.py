"""The cloud fallback: used only when local recognition cannot answer, and only when reachable.

Never needed to start: nothing here touches the network or the key file at import or
construction; a missing key file or an unreachable service only keeps voiced local.

>>> router = CloudRouter.from_recognizer(config.cloud, intents)
>>> if router.should_use_cloud_intent(None):
...     router.submit_intent(text, on_result)   # on_result(CloudResult) on a cloud thread
"""

from voiced.cloud.breaker import BreakerState, CircuitBreaker
from voiced.cloud.catalog import IntentCatalog, IntentSpec, SlotSpec
from voiced.cloud.clients import CallKind, CloudClient, Count
from voiced.cloud.config import CloudConfig
from voiced.cloud.doctor import doctor_lines
from voiced.cloud.errors import CloudError, CloudErrorKind
from voiced.cloud.pool import CloudOutcome, CloudResult, CloudTicket
from voiced.cloud.probe import Prober, ProbeResult, ProbeStatus
from voiced.cloud.router import CloudRouter, CloudState, CloudStatus

__all__ = [
    "BreakerState",
    "CallKind",
    "CircuitBreaker",
    "CloudClient",
    "CloudConfig",
    "CloudError",
    "CloudErrorKind",
    "CloudOutcome",
    "CloudResult",
    "CloudRouter",
    "CloudState",
    "CloudStatus",
    "CloudTicket",
    "Count",
    "IntentCatalog",
    "IntentSpec",
    "ProbeResult",
    "ProbeStatus",
    "Prober",
    "SlotSpec",
    "doctor_lines",
]
