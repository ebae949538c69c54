"""A hierarchical timing wheel and its asyncio driver.

``TimerWheel`` is pure data driven by explicit times (no clock, no I/O); ``WheelDriver``
owns a :class:`~schedd._clock.Clock`, sleeps until the next non-empty bucket and hands
each batch of expired items to a callback.
"""

from schedd.timerwheel._driver import WheelDriver
from schedd.timerwheel._handle import TimerHandle
from schedd.timerwheel._wheel import TimerWheel

__all__ = ["TimerHandle", "TimerWheel", "WheelDriver"]
