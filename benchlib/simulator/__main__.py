from __future__ import annotations

import sys

from .cli import parse_config
from .server import main

if __name__ == "__main__":
    sys.exit(main(parse_config()))
