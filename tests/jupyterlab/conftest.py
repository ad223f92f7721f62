"""The JupyterLab and site-markup tests run from `make jupyterlab` (which `make test`
calls after the book is built): they start servers and a browser, so the unit run
(`pytest tests`) leaves them out unless ATTNLIB_JUPYTERLAB=1."""
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))

if not os.environ.get("ATTNLIB_JUPYTERLAB"):
    collect_ignore_glob = ["test_*.py"]
