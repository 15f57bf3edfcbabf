"""The pipeline spec: typed models and YAML loading with located errors.

Importing this package imports neither torch nor Ray, so ``engage validate`` stays fast.
"""

from engage.spec.loader import LoadedSpec, load_spec, parse_spec
from engage.spec.models import PipelineSpec
from engage.spec.overrides import apply_overrides

__all__ = ["LoadedSpec", "PipelineSpec", "apply_overrides", "load_spec", "parse_spec"]
