"""engage: an ML experiment platform on Ray.

Importing engage starts nothing: no Ray session, no MLflow client, no server.
"""

from engage.errors import EngageError

__version__ = "0.1.0"

__all__ = ["EngageError", "__version__"]
