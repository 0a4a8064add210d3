"""Import kafka-python's message classes quietly: building them from its bundled JSON
uses importlib.resources APIs that warn (DeprecationWarning) once per message type."""

from __future__ import annotations

import importlib
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    for _name in ("admin", "consumer", "metadata", "producer", "sasl"):
        importlib.import_module(f"kafka.protocol.{_name}")
