"""Runtime services: ONNX session factory, backoff, systemd, affinity, supervisor."""
