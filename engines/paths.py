from __future__ import annotations

# Where `make engines` puts what it builds: a cache outside the clone, keyed by version, so that
# a machine builds each engine once (engines/build_llama_server.sh writes the same paths).
import os
from pathlib import Path

# The llama-cpp-python sdist whose vendored llama.cpp is built (llama.cpp 0c1e570).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"


def engine_cache() -> Path:
    env = os.environ.get("SPECDASH_ENGINE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "specdash" / "engines"


def llama_server_binary() -> Path:
    return engine_cache() / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}" / "bin" / "llama-server"
