"""The optimisation stage (translate -> optimize -> check): a lean graph, the same values."""

from onnxsight.exporter.optimize._passes import OPTIMIZED_AWAY_KEY, ORT_FUSION, OptimizeReport, optimize_translated

__all__ = ["OPTIMIZED_AWAY_KEY", "ORT_FUSION", "OptimizeReport", "optimize_translated"]
