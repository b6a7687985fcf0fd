"""Reading sources side by side, in worker processes.

Parsing is Python code holding the interpreter lock, so threads would take turns; processes run
on their own cores. A worker is a fresh interpreter running this module (`python -m`), not a
fork (forking a process that runs threads, the web app's or DuckDB's, can copy a lock held by a
thread that does not exist in the child) and not multiprocessing's spawn (which re-runs the
caller's main script, so any script calling `load_all` would need a `__main__` guard). It reads
its list of tasks from stdin, runs them in order and writes each result, pickled, to a pipe of
its own (stdout stays free for anything a library prints); an exception a task raises is raised
again here, unchanged. A worker that dies (killed, out of memory) is a SourceError naming the
source it was reading. Leaving the `with` block stops any worker still running (an error here or
there ends the whole load).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from twice.connectors.base import SourceError

_ROOT = str(Path(__file__).resolve().parents[2])  # where `twice` is imported from


class Task:
    """`fn(*args)` to run in a worker; its result is reported under `index`, and `label` names
    it if the worker dies."""

    __slots__ = ("args", "fn", "index", "label")

    def __init__(self, index: int, label: str, fn: Callable[..., Any], *args: Any) -> None:
        self.index, self.label, self.fn, self.args = index, label, fn, args


def _portable(exc: BaseException) -> BaseException:
    """The exception as it can cross the pipe: itself, with the worker's traceback as a note
    unless it is a SourceError (whose message is all the user needs)."""
    if not isinstance(exc, SourceError):
        exc.add_note("in a worker process:\n" + "".join(traceback.format_exception(exc)))
    try:
        pickle.dumps(exc)
        return exc
    except Exception:  # noqa: BLE001 - anything unpicklable travels as its text
        return RuntimeError(f"{type(exc).__name__}: {exc}\n"
                            + "".join(traceback.format_exception(exc)))


def _work(out: IO[bytes], tasks: list[Task]) -> None:
    for task in tasks:
        try:
            result = ("ok", task.index, task.fn(*task.args))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            pickle.dump(("error", task.index, _portable(exc)), out, protocol=5)
            return
        pickle.dump(result, out, protocol=5)
        del result  # not held while the next task runs
        out.flush()


class Workers:
    """Worker processes started with `start`, their results read with `results`."""

    def __init__(self) -> None:
        self._running: list[tuple[subprocess.Popen[bytes], IO[bytes], list[Task]]] = []

    def __enter__(self) -> Workers:
        return self

    def start(self, tasks: list[Task]) -> None:
        """One new process runs `tasks`, in order."""
        if not tasks:
            return
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "twice.connectors.parallel", str(write_fd)],
                stdin=subprocess.PIPE, pass_fds=(write_fd,), env=env)
        finally:
            os.close(write_fd)  # the worker holds the writing end now: EOF here when it dies
        results = os.fdopen(read_fd, "rb", buffering=2**20)
        self._running.append((process, results, tasks))
        assert process.stdin is not None
        with process.stdin:
            pickle.dump(tasks, process.stdin, protocol=5)

    def results(self) -> Iterator[tuple[int, Any]]:
        """(index, result) of every task, worker by worker; raises what a task raised."""
        for process, results, tasks in self._running:
            for task in tasks:
                try:
                    status, index, value = pickle.load(results)
                except (EOFError, OSError, pickle.UnpicklingError):
                    code = process.wait(timeout=10)
                    why = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
                    if code == -9:
                        why += ": out of memory?"
                    raise SourceError(task.label, "the worker process reading it stopped "
                                      f"({why})") from None
                if status == "error":
                    raise value
                yield index, value

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for process, results, _ in self._running:
            if process.poll() is None and exc_type is not None:
                process.kill()  # the load failed or was interrupted: no one waits for it
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            results.close()
        self._running.clear()


def main() -> None:
    """A worker: tasks from stdin, results to the file descriptor named on the command line."""
    from twice.formats import log_visibly

    log_visibly()  # its stderr is the command's
    tasks = pickle.load(sys.stdin.buffer)
    with os.fdopen(int(sys.argv[1]), "wb", buffering=2**20) as out:
        _work(out, tasks)


if __name__ == "__main__":
    main()
