"""`kill -USR1` a service that seems stuck: where every one of its tasks
waits goes to its log."""

from __future__ import annotations

import asyncio
import io
import logging


def log_tasks(log: logging.Logger) -> None:
    for task in asyncio.all_tasks():
        stack = io.StringIO()
        task.print_stack(file=stack)
        log.warning("task %s: %s", task.get_name(), stack.getvalue())
