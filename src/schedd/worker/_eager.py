"""A task whose first step runs at once, on the caller's stack (what 3.12's eager tasks do).

A no-op handler costs ~0.2 us to call, but ~10 us when it is wrapped in an ``asyncio.Task``
and finished through the event loop (the task's first step and its done callback each go
through ``call_soon``). Most handlers of a busy worker finish without ever suspending, so the
worker runs the first step here, synchronously: if the coroutine returns, the task is done
before the constructor returns and nothing was scheduled. If it suspends, the task waits on
what the coroutine awaited exactly like an ``asyncio.Task`` and finishes through the loop.

The first step runs *as* this task: ``asyncio.current_task()`` is this object from the first
line of the handler to its last (so ``asyncio.timeout()``, ``TaskGroup`` and task-keyed state
work, and never touch the worker's stream task), and the coroutine runs in a copy of the
context like any task's. Python 3.11 has no eager tasks, so this subclasses the pure-Python
``asyncio.Task`` (``asyncio.tasks._PyTask``), whose later steps cost about what the C task's do.
"""

from __future__ import annotations

import asyncio
import contextvars
from asyncio import futures, tasks
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    _PyTask = asyncio.Task
else:
    _PyTask = tasks._PyTask

_futures: Any = futures  # the pure-Python Future's methods are not in the stubs
_enter_task = tasks._enter_task
_leave_task = tasks._leave_task
_register_task = tasks._register_task
_current_task = tasks.current_task
_copy_context = contextvars.copy_context
_future_set_result = _futures._PyFuture.set_result
_future_set_exception = _futures._PyFuture.set_exception
_future_cancel = _futures._PyFuture.cancel
_get_loop = _futures._get_loop


class EagerTask(_PyTask[Any]):
    """``asyncio.Task(coro)`` with its first step already run when the constructor returns.

    Check :meth:`done` right after construction: True means the coroutine finished (or raised)
    without suspending; ``returned_eagerly`` then says it returned (its value is ``result()``).
    ``KeyboardInterrupt`` and ``SystemExit`` propagate from the constructor (as they propagate
    out of a task's step).
    """

    #: True when the coroutine returned on the first step (not cancelled, nothing raised),
    #: and what it returned: read without the future's result() machinery.
    returned_eagerly = False
    eager_value: Any = None

    # The attributes asyncio.Task.__init__ would set, as class defaults: cheaper to create.
    _num_cancels_requested = 0
    _must_cancel = False
    _fut_waiter = None
    _log_destroy_pending = True
    _cancel_message: str | None = None

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        loop: asyncio.AbstractEventLoop,
        name: str = "schedd-handler",
    ) -> None:
        self._loop = loop  # type: ignore[misc]
        self._callbacks = []  # type: ignore[misc]
        self._coro = coro
        self._name = name
        self._context = context = _copy_context()
        outer = _current_task(loop)
        if outer is not None:
            _leave_task(loop, outer)
        _enter_task(loop, self)
        try:
            yielded = context.run(coro.send, None)
        except StopIteration as e:
            if self._must_cancel:  # the handler cancelled itself and returned anyway
                _future_cancel(self, msg=self._cancel_message)
            else:
                _future_set_result(self, e.value)
                self.returned_eagerly = True
                self.eager_value = e.value
        except asyncio.CancelledError as e:
            self._cancelled_exc = e
            _future_cancel(self)
        except (KeyboardInterrupt, SystemExit) as e:
            _future_set_exception(self, e)
            raise
        except BaseException as e:
            _future_set_exception(self, e)
        else:
            _register_task(self)
            self._wait_for(yielded)
        finally:
            _leave_task(loop, self)
            if outer is not None:
                _enter_task(loop, outer)

    def _wait_for(self, yielded: Any) -> None:
        """What ``Task.__step`` does with the value a suspended coroutine yielded."""
        step = self._Task__step  # type: ignore[attr-defined]
        blocking = getattr(yielded, "_asyncio_future_blocking", None)
        if blocking and _get_loop(yielded) is self._loop and yielded is not self:
            yielded._asyncio_future_blocking = False
            yielded.add_done_callback(self._Task__wakeup, context=self._context)  # type: ignore[attr-defined]
            self._fut_waiter = yielded
            if self._must_cancel and yielded.cancel(msg=self._cancel_message):
                self._must_cancel = False
        elif yielded is None:  # a bare yield (asyncio.sleep(0)): run the next step soon
            self._loop.call_soon(step, context=self._context)
        else:
            error = RuntimeError(f"Task got bad yield: {yielded!r}")
            self._loop.call_soon(step, error, context=self._context)
