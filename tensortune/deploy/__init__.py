"""Deploying a tuned model without the compiler: the export directory and its runtime."""
from __future__ import annotations

from .export import ExportError, export_model, read_manifest, synthetic_recipe
from .runtime import RuntimeBundleError, collect_runtime
from .session_export import export_session

__all__ = ["export_model", "export_session", "synthetic_recipe", "read_manifest", "ExportError", "collect_runtime",
           "RuntimeBundleError"]
