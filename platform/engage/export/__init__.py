"""Cross-platform model export: ONNX and TorchScript, each checked against torch.

``export_stage`` is the pipeline's step; ``export_onnx``, ``export_torchscript`` and
``check_equivalence`` are the parts, usable on any module that takes one float32 tensor.
"""

from engage.export.equivalence import DEFAULT_TOLERANCE, Equivalence, check_equivalence
from engage.export.onnx import OnnxExport, export_onnx
from engage.export.stage import ExportReport, export_all, export_stage
from engage.export.torchscript import TorchScriptExport, export_torchscript

__all__ = [
    "DEFAULT_TOLERANCE",
    "Equivalence",
    "ExportReport",
    "OnnxExport",
    "TorchScriptExport",
    "check_equivalence",
    "export_all",
    "export_onnx",
    "export_stage",
    "export_torchscript",
]
