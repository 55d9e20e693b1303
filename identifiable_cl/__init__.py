"""identifiable-cl: when does a contrastive loss recover the true latent factors?"""

from importlib import metadata

try:
    __version__ = metadata.version("identifiable-cl")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
