"""`python3 tools/gpu_check ...`: Python runs this folder. Its parent (tools/) goes first on sys.path in
place of the folder itself, so that the modules import each other as `gpu_check.xxx` and none of their
short names (main, plugin, archive, ...) shadows another module; then gpu_check.main runs."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [str(HERE.parent)] + [p for p in sys.path if not p or Path(p).resolve() != HERE]

from gpu_check.main import main  # noqa: E402

sys.exit(main())
