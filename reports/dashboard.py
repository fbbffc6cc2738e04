"""``tsopt dashboard``: optuna-dashboard on tsopt's database, as it is.

Optuna's RDB storage lives in the same database as tsopt's tables, so the
dashboard reads the studies directly: no export, no conversion.
"""

from __future__ import annotations

import importlib.util

from rich.console import Console

from tsopt.core.errors import UserInputError
from tsopt.db.engine import display_url, parse_url
from tsopt.reports.existing import open_existing


def dashboard_command(db_url: str, port: int, console: Console) -> int:
    """Serve optuna-dashboard on 127.0.0.1:``port`` until interrupted; returns the exit code."""
    if not 0 < port < 65536:
        raise UserInputError(f"--port {port} is not a TCP port (1-65535)")
    if importlib.util.find_spec("optuna_dashboard") is None:
        console.print("optuna-dashboard is not installed: pip install optuna-dashboard")
        return 1
    import optuna_dashboard

    with open_existing(db_url) as store:
        storage = store.optuna_storage()
        console.print(
            f"optuna-dashboard on http://127.0.0.1:{port}/ for {display_url(parse_url(db_url))} "
            "(Ctrl-C stops it)"
        )
        optuna_dashboard.run_server(storage, host="127.0.0.1", port=port)
    return 0
